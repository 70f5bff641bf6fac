"""The HTML report's model: everything the page shows, measured and judged before it is laid out.

The report use case (``application.report``) fills it from one opened profile; this package only
formats it. The types are the analysis' and the advice's own results.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from ...advice.finding import Finding
    from ...analysis.core.report import ReportResult
    from ...analysis.core.summary import Summary
    from ...analysis.core.tensor_core_kernels import TensorCoreShare
    from ...analysis.core.timeseries import Bins
    from ...analysis.measures.modules import ModuleView
    from ...analysis.reports.roofline import Roofline
    from ...store.meta import Meta


@dataclass
class GpuOverTime:
    """The GPU section's series over ``bins`` equal bins of the selected span."""

    bins: Bins
    busy: pa.Table  # per (rank, device) and bin: busy_pct
    counters: pa.Table  # per (rank, device, metric) and bin: mean, min, max
    bands: pa.Table  # the outermost phases, shaded behind the series


@dataclass
class ReportModel:
    """What ``dlscope report`` shows for one profile."""

    path: Path  # the profile, as opened
    meta: Meta
    summary: Summary
    findings: list[Finding]  # largest saving first
    durations: pa.Table  # (step, duration_ns) of the statistics steps
    per_step: pa.Table  # (step, duration_ns, phase, ns): the phases of each step
    tensor_cores: TensorCoreShare | None  # None without kernels
    kernel_ns_per_step: float | None  # kernel time per traced step
    gpu: GpuOverTime | None  # None for a profile without events
    busy_pct: float | None  # mean GPU busy share over the bins with GPU work
    counters_by_phase: ReportResult | None  # the gpu_metrics report
    why_no_counters: str | None  # why that report could not run
    top_kernels: pa.Table
    top_ops: pa.Table
    roofline: Roofline | None = None  # None without input shapes or the GPU's peaks
    why_no_roofline: str | None = None  # why there is no roofline
    modules: ModuleView | None = None  # None without module calls
