"""Layout conversions: the kernels that convert tensors between NCHW and NHWC around
convolutions (cuDNN's ``nchwToNhwcKernel`` / ``nhwcToNchwKernel`` and their kin), by launching op
and kernel: calls and time per GPU window, the steps seen."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.kernel_names import kernel_names, kernel_op_join
from . import measured
from .basis import basis, in_gpu_windows

# (pattern, example) -- layout conversion kernels
LAYOUT_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"nchwtonhwc|nhwctonchw", "cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>"),
    (r"nchw2nhwc|nhwc2nchw|nchw_to_nhwc|nhwc_to_nchw", "xmma_cudnn::nchw2nhwc_kernel"),
)
LAYOUT_RE = "|".join(f"({p})" for p, _ in LAYOUT_PATTERNS)


@dataclass(frozen=True)
class LayoutConversion:
    """One (op, kernel) of the layout conversions, per GPU window."""

    op: str | None  # the framework op that launched the kernel (None without ops)
    kernel: str
    calls_per_step: float
    ms_per_step: float
    steps: tuple[int | None, ...]


@measured
def layout_conversions(data: ProfileData) -> tuple[LayoutConversion, ...]:
    """The layout conversion kernels of the GPU windows, longest first."""
    windows = basis(data).windows
    rows = data.rows(f"""
        SELECT o.name AS op, k.name AS kernel, count(*)::DOUBLE / {windows} AS calls_per_step,
               sum(k.end_ns - k.start_ns)::DOUBLE / 1e6 / {windows} AS ms_per_step,
               list(DISTINCT k.step ORDER BY k.step) AS steps
        FROM kernels k SEMI JOIN (SELECT name_id FROM {kernel_names(data)}
                                  WHERE regexp_matches(lower(name), '{LAYOUT_RE}')) n ON n.name_id = k.name_id
        {in_gpu_windows(data, "k")} {kernel_op_join(data)}
        GROUP BY ALL ORDER BY ms_per_step DESC""")
    return tuple(
        LayoutConversion(r["op"], r["kernel"], r["calls_per_step"], r["ms_per_step"], tuple(r["steps"] or ()))
        for r in rows
    )
