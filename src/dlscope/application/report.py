"""The report use case: measure and judge one opened profile into the HTML report's model
(``render.html.ReportModel``), which ``render.html`` lays out without running anything."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.core.context import ProfileData
    from ..analysis.reports.roofline import Roofline
    from ..render.html.model import ReportModel
    from ..render.progress import ProgressCallback


def build_report(data: ProfileData, progress: ProgressCallback | None = None) -> ReportModel:
    """Everything ``dlscope report`` shows for ``data``: the summary, the advice, the steps and their
    phases, the GPU and its counters over time, the top kernels and ops, the roofline. ``progress`` hears of
    each part as it starts."""
    from ..analysis.core.step_phases import step_durations, step_phases
    from ..analysis.core.summary import summarize
    from ..analysis.core.tensor_core_kernels import tensor_core_share
    from ..analysis.core.timeseries import counters_binned, gpu_busy, phase_bands, time_bins
    from ..analysis.core.top import top_kernels, top_ops
    from ..analysis.core.window import detail_step_count
    from ..analysis.measures.modules import module_view
    from ..analysis.reports import gpu_metrics
    from ..render.html.model import GpuOverTime, ReportModel
    from .advise import advise

    step = progress or (lambda what, frac: None)
    step("report: summary", 0.0)
    s = summarize(data)
    tc = tensor_core_share(data) if data.has("kernels") else None
    step("report: advice", 0.2)
    findings = list(advise(data).findings)
    step("report: steps and phases", 0.35)
    durations = step_durations(data)
    per_step = step_phases(data) if durations.num_rows else durations.slice(0, 0)
    step("report: GPU over time", 0.5)
    why_no_counters = gpu_metrics.REPORT.missing(data)
    by_phase = None if why_no_counters else gpu_metrics.REPORT.compute(data)
    bins = time_bins(data)
    gpu, busy_pct = None, None
    if bins is not None:
        busy = gpu_busy(data, bins)
        gpu = GpuOverTime(bins, busy, counters_binned(data, bins), phase_bands(data, bins))
        if busy.num_rows:
            vals = busy.column("busy_pct").to_pylist()
            busy_pct = sum(vals) / len(vals)
    traced = detail_step_count(data)
    per_step_kernel = tc.kernel_ns / traced if tc is not None and traced else None
    step("report: kernels and ops", 0.7)
    rl, why_no_roofline = _roofline(data)
    return ReportModel(
        path=data.path,
        meta=data.meta,
        summary=s,
        findings=findings,
        durations=durations,
        per_step=per_step,
        tensor_cores=tc,
        kernel_ns_per_step=per_step_kernel,
        gpu=gpu,
        busy_pct=busy_pct,
        counters_by_phase=by_phase,
        why_no_counters=why_no_counters,
        top_kernels=top_kernels(data),
        top_ops=top_ops(data),
        roofline=rl,
        why_no_roofline=why_no_roofline,
        modules=module_view(data),
    )


def _roofline(data: ProfileData) -> tuple[Roofline | None, str | None]:
    """The roofline report's figures for the chart, or why there are none (no input shapes: not
    --mode full; a GPU whose peaks the datasheet table lacks)."""
    from ..analysis.reports.roofline import REPORT, roofline

    why = REPORT.missing(data)
    if why is not None:
        return None, why
    r = roofline(data)
    if r.gpu.peaks is None:
        return None, r.gpu.found.why_not
    return r, None
