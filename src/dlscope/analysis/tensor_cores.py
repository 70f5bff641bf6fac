"""Tensor-core share: how much of the GPU's kernel time ran on tensor cores.

The evidence is the kernel's name: cuBLAS, cuDNN and CUTLASS name their tensor-core kernels by
the instruction or the data type they use (``tensorop``, ``wgmma``/``hmma``/``imma``, Hopper's
``nvjet``, ``s1688gemm``, an ``xmma`` GEMM on f16/bf16/tf32/fp8), while the CUDA-core ones say
``ffma``/``simt``. An fp32 model shows ~0 and its bf16 autocast version a large share; the share
of kernel time is an upper bound on how busy the tensor cores were (a tensor-core kernel also
spends time elsewhere). Where the profile has GPM counters, ``tensor_active`` measures it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .context import ProfileData
from .window import step_filter

TENSOR_CORE = re.compile(
    r"tensorop|wgmma|hmma|imma|gmma|nvjet|flash_fwd|flash_bwd|[shi]\d{3,5}gemm"
    r"|xmma.*(bf16|f16|tf32|e4m3|e5m2|i8)", re.IGNORECASE)
CUDA_CORE = re.compile(r"ffma|simt", re.IGNORECASE)


def is_tensor_core_kernel(name: str) -> bool:
    return bool(TENSOR_CORE.search(name)) and not CUDA_CORE.search(name)


@dataclass
class TensorCoreShare:
    kernel_ns: int  # all kernel time in the selection
    tensor_ns: int  # time of kernels named as tensor-core kernels
    kernels: list[tuple[str, int, int]] = field(default_factory=list)  # (name, count, ns), longest first
    tensor_active_pct: float | None = None  # GPM tensor_active, mean over samples, when sampled

    @property
    def pct(self) -> float | None:
        return 100.0 * self.tensor_ns / self.kernel_ns if self.kernel_ns else None


def tensor_core_share(data: ProfileData) -> TensorCoreShare:
    # one Python step per distinct kernel name, not per kernel
    rows = data.con.execute(f"""SELECT name, count(*), sum(end_ns - start_ns)::BIGINT FROM kernels
                                WHERE {step_filter(data)} GROUP BY name""").fetchall()
    total = sum(int(ns) for _, _, ns in rows)
    tc = sorted(((n, int(c), int(ns)) for n, c, ns in rows if is_tensor_core_kernel(n)), key=lambda r: -r[2])
    active = data.scalar(f"SELECT avg(value) FROM counters WHERE metric = 'tensor_active' AND {step_filter(data)}")
    return TensorCoreShare(total, sum(r[2] for r in tc), tc, None if active is None else float(active))
