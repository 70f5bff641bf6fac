"""Facts about the profiled program, as far as the profile shows them: framework, data loader,
optimizer, compilation, CUDA graphs, precision, device. The advice words its changes by these."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.hardware import Device, device_of
from ..core.kernel_names import kernel_names
from . import measured


@dataclass(frozen=True)
class Facts:
    """What the program uses, as far as the profile shows it."""

    framework: str  # 'pytorch' or 'cuda' (generic wording)
    dataloader: str | None  # 'single' (num_workers=0), 'multi', or None (no DataLoader seen)
    optimizer: str | None  # e.g. 'AdamW', from Optimizer.step#AdamW.step
    compiled: bool  # torch.compile / Triton kernels seen
    cuda_graphs: bool  # graph launches seen
    low_precision_math: bool  # some matrix math already runs in 16 bits
    device: Device | None
    foreign_runtime: bool = False  # runtime calls recorded, none of them CUDA or HIP (another accelerator)

    @property
    def torch(self) -> bool:
        return self.framework == "pytorch"


def _any(data: ProfileData, table: str, where: str) -> bool:
    """Whether some row of ``table`` matches ``where`` (stops at the first)."""
    return data.has(table) and bool(data.scalar(f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {where} LIMIT 1)"))


@measured
def facts(data: ProfileData) -> Facts:
    """The program's :class:`Facts`."""
    d = data
    # in order: with several optimizers, the same one is named every run
    names = (
        [
            r[0]
            for r in d.con.execute(
                "SELECT DISTINCT name FROM phases WHERE name LIKE '%DataLoader%' OR name LIKE 'Optimizer.step#%' "
                "ORDER BY name"
            ).fetchall()
        ]
        if d.has("phases")
        else []
    )
    # PyTorch's signs: its ops, its own annotations (DataLoader, optimizer), ATen's kernels
    torch_ops = _any(d, "ops", "name LIKE 'aten::%'")
    aten = _any(d, "kernels", "name LIKE '%at::native::%'")
    framework = "pytorch" if ("torch" in d.meta.frameworks or torch_ops or names or aten) else "cuda"
    loader = None
    if any("_MultiProcessingDataLoaderIter" in n for n in names):
        loader = "multi"
    elif any("_SingleProcessDataLoaderIter" in n for n in names):
        loader = "single"
    opt = next((m.group(1) for n in names if (m := re.match(r"Optimizer\.step#(\w+)\.step", n))), None)
    compiled = _any(d, "kernels", "name LIKE 'triton%'")
    if not compiled:
        compiled = _any(d, "ops", "name LIKE 'CompiledFunction%' OR name LIKE 'Torch-Compiled Region%'")
    graphs = _any(d, "api", "lower(name) LIKE '%graphlaunch%'")
    low = d.has("kernels") and bool(
        d.scalar(f"SELECT count(*) FROM (SELECT 1 FROM {kernel_names(d)} WHERE precision = 'low' LIMIT 1)")
    )
    foreign = d.has("api") and not d.scalar(
        "SELECT count(*) FROM (SELECT 1 FROM api WHERE regexp_matches(lower(name), '^(cuda|cu|hip|hsa)') LIMIT 1)"
    )
    return Facts(framework, loader, opt, compiled, graphs, low, device_of(d.meta.devices), bool(foreign))
