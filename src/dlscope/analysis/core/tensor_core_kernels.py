"""Which kernels use tensor cores, and which ops could: judged from names.

A trace does not say whether a kernel issued tensor-core (MMA) instructions, but NVIDIA's
libraries name their kernels after the instruction and the data types (as DLProf relied on).
The lists below are kept here, in one place, for every report and advice rule:
:func:`is_tensor_core_kernel` and :func:`tensor_core_sql` apply the same patterns, in Python and
in DuckDB SQL. Patterns are case-insensitive regular expressions in the subset that Python's
``re`` and DuckDB's RE2 share. A name that matches a negative pattern is never tensor-core; else
one that matches a positive pattern is; anything else is not (unknown names, e.g. Triton's
``triton_*`` kernels, count as not using tensor cores; GPM tensor activity, when sampled, is the
second opinion).

Maintaining the list: add a pattern with its example name in the comment and a case in
``tests/test_tensor_cores.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .context import ProfileData

# (pattern, an example name it is for) -- never tensor-core, checked first
NON_TENSOR_CORE_PATTERNS: tuple[tuple[str, str], ...] = (
    # xmma kernels doing fp32 math on CUDA cores
    (r"_ffma", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4"),
    (r"simt", "cutlass_80_simt_sgemm_128x256_8x4_nt_align1"),  # CUTLASS on CUDA cores
    (r"sgemm|dgemm|cgemm|zgemm", "ampere_sgemm_128x64_tn"),  # also volta_sgemm, implicit_convolve_sgemm
    (r"gemv", "gemv2T_kernel_val"),
    (r"scudnn", "ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1"),  # single-precision cuDNN
    # PyTorch's memory-efficient attention: fp32 runs on CUDA cores below sm80, everything on sm50
    (r"fmha_cutlass[fb]_f32_.*_sm[5-7][05]|fmha_cutlass[fb]_.*_sm50", "fmha_cutlassF_f32_aligned_64x64_rf_sm75"),
)

# (pattern, an example name it is for) -- tensor-core kernels, Volta (sm70) through Hopper (sm90)
# and Blackwell
TENSOR_CORE_PATTERNS: tuple[tuple[str, str], ...] = (
    # cuBLAS/cuDNN kernels named after the MMA shape: h884 (Volta fp16), s884/s1688/s16816 (fp16 or
    # bf16 inputs with fp32 accumulation, or tf32), h1688/h16816 (Turing/Ampere fp16), i8816/i16832 (int8)
    (r"[hsid](884|1688|16816|8816|16832|16864)", "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn"),
    # the MMA instructions: HMMA (fp16/bf16/tf32), IMMA (int8), BMMA (binary), DMMA (fp64), QMMA (fp8)
    (r"(hmma|imma|bmma|dmma|qmma)", "sm75_xmma_fprop_implicit_gemm_interleaved_i8i8_i8i32_f32_imma"),
    (r"tensorop", "cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4"),  # also cutlass3x_sm90_tensorop_...
    (r"wmma", "cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_tn_align8"),
    # Hopper warpgroup MMA, Blackwell tcgen05
    (r"wgmma|gmma|tcgen05", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1"),
    (r"nvjet", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),  # cuBLASLt, Hopper and later
    # xmma kernels name their operand types: tf32, f16, bf16, fp8 (e4m3/e5m2), int8 (i8)
    (r"xmma.*(tf32|f16|e4m3|e5m2|i8i8|_i8_|int8)", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"),
    (r"tensor\d+x\d+x\d+", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x16_tensor16x8x8_kernel"),
    # attention: FlashAttention 2/3, cuDNN SDPA, TensorRT fmha, PyTorch's memory-efficient attention
    # (fp16/bf16, and fp32 on sm80+ as 3xTF32 on tensor cores)
    (r"flash_fwd|flash_bwd|flash::|flashattn|flash_attn|fmha|fused_mha|sdpa", "flash_fwd_kernel"),
    # AMD matrix cores (MFMA), named by Tensile/rocBLAS as _MI<m>x<n>x<k>
    (r"_mi\d+x\d+x\d+|mfma", "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0"),
)

# Ops whose work could run on tensor cores (DLProf's "TC eligible"): matrix products,
# convolutions, attention. Matched against the op name with its namespace (aten::mm, Conv2D).
TENSOR_CORE_ELIGIBLE_OP_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        r"(^|::)(mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_int_mm|_addmm_activation|_grouped_mm"
        r"|_scaled_grouped_mm|einsum|tensordot|bilinear|_trilinear)$",
        "aten::mm, aten::addmm, aten::linear",
    ),
    (r"matmul|gemm|batchmatmul|fusedmatmul", "MatMul, BatchMatMulV2, _FusedMatMul (TensorFlow), torch_gemm"),
    (
        r"convolution|(^|::|_)conv(\d?d|_transpose\w*|_tbc)?($|_|\()|conv[123]d",
        "aten::convolution, aten::cudnn_convolution, Conv2D",
    ),
    (r"attention|attn|sdpa|fmha", "aten::_scaled_dot_product_flash_attention, aten::_efficient_attention_backward"),
    # XLA's HLO ops (JAX, TensorFlow with XLA): dot products and the library calls they become
    (
        r"^(dot|dot_general|cublas-gemm|cublas-lt-matmul|cudnn-conv|triton_gemm|gemm_fusion)([._]\d+)?$|__cublas|__cudnn\$conv",
        "dot.2, cublas-gemm.1, cudnn-conv.3 (XLA)",
    ),
)


def _alternation(patterns: tuple[tuple[str, str], ...]) -> str:
    return "|".join(f"({p})" for p, _ in patterns)


NON_TENSOR_CORE_RE = _alternation(NON_TENSOR_CORE_PATTERNS)
TENSOR_CORE_RE = _alternation(TENSOR_CORE_PATTERNS)
ELIGIBLE_OP_RE = _alternation(TENSOR_CORE_ELIGIBLE_OP_PATTERNS)

_NON_TC = re.compile(NON_TENSOR_CORE_RE, re.IGNORECASE)
_TC = re.compile(TENSOR_CORE_RE, re.IGNORECASE)
_ELIGIBLE = re.compile(ELIGIBLE_OP_RE, re.IGNORECASE)


def is_tensor_core_kernel(name: str | None) -> bool:
    """True when the kernel's name says it uses tensor cores."""
    if not name:
        return False
    return _NON_TC.search(name) is None and _TC.search(name) is not None


def is_tensor_core_eligible_op(name: str | None) -> bool:
    """True when the op is of a type that can run on tensor cores (GEMM, convolution, attention)."""
    return bool(name) and _ELIGIBLE.search(name or "") is not None


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def tensor_core_sql(name_col: str = "name") -> str:
    """SQL boolean expression: :func:`is_tensor_core_kernel` of ``name_col``."""
    n = f"lower(coalesce({name_col}, ''))"
    return (
        f"(NOT regexp_matches({n}, {_sql_str(NON_TENSOR_CORE_RE.lower())}) "
        f"AND regexp_matches({n}, {_sql_str(TENSOR_CORE_RE.lower())}))"
    )


def eligible_op_sql(name_col: str = "name") -> str:
    """SQL boolean expression: :func:`is_tensor_core_eligible_op` of ``name_col``."""
    return f"regexp_matches(lower(coalesce({name_col}, '')), {_sql_str(ELIGIBLE_OP_RE.lower())})"


@dataclass
class TensorCoreShare:
    """How much of the kernel time ran in tensor-core kernels (for the report's headline card).
    The share of kernel time is an upper bound on how busy the tensor cores were; GPM's
    ``tensor_active``, when sampled, measures it."""

    kernel_ns: int  # all kernel time in the selection
    tensor_ns: int  # time of kernels named as tensor-core kernels
    kernels: list[tuple[str, int, int]] = field(default_factory=list)  # (name, count, ns), longest first
    tensor_active_pct: float | None = None  # GPM tensor_active, mean over samples, when sampled

    @property
    def pct(self) -> float | None:
        return 100.0 * self.tensor_ns / self.kernel_ns if self.kernel_ns else None


def tensor_core_share(data: ProfileData) -> TensorCoreShare:
    from .window import step_filter

    rows = data.con.execute(f"""SELECT name, count(*), sum(end_ns - start_ns)::BIGINT,
                                       {tensor_core_sql("name")} AS tc
                                FROM kernels WHERE {step_filter(data)} GROUP BY name""").fetchall()
    total = sum(int(ns) for _, _, ns, _ in rows)
    tc = sorted(((n, int(c), int(ns)) for n, c, ns, is_tc in rows if is_tc), key=lambda r: -r[2])
    active = data.scalar(f"SELECT avg(value) FROM counters WHERE metric = 'tensor_active' AND {step_filter(data)}")
    return TensorCoreShare(total, sum(r[2] for r in tc), tc, None if active is None else float(active))
