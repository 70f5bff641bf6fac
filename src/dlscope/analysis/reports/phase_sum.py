"""phase_sum: per phase name, its time and the GPU work it launched."""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.phase_gpu import gpu_activity_sql
from ..core.phases import phase_breakdown
from ..core.report import Report, ReportResult, fixed


def compute(data: ProfileData) -> ReportResult:
    rows = phase_breakdown(data)
    import pyarrow as pa

    table = pa.table(
        {
            "name": [r.name for r in rows],
            "depth": [r.depth for r in rows],
            "count": [r.count for r in rows],
            "total_ms": [r.total_ms for r in rows],
            "mean_ms": [r.mean_ms for r in rows],
            "pct": [r.pct_of_step for r in rows],
            "gpu_ms": [r.gpu_ms for r in rows],
            "kernels": [r.kernels for r in rows],
            "gpu_span_ms": [r.gpu_span_ms for r in rows],
            "source": [r.source for r in rows],
        }
    )
    notes = [
        (
            "mean_ms is per step and pct is of step time"
            if data.scalar("SELECT count(*) FROM sel_steps")
            else "no steps: mean_ms is per instance and pct is of wall time"
        )
    ]
    if gpu_activity_sql(data) is None:
        table = table.drop_columns(["gpu_ms", "kernels"])
    else:
        notes.append("gpu_ms, kernels: GPU time and kernels launched inside the phase, per traced step")
    if all(r.gpu_span_ms is None for r in rows):
        table = table.drop_columns(["gpu_span_ms"])
    else:
        notes.append(
            "gpu_span_ms: the GPU's time from the phase's start to its end marker (CUDA events, every "
            "measured step, traced or not): its work plus any wait, such as a collective's"
        )
    return ReportResult(
        "phase_sum",
        REPORT.title,
        table,
        {"total_ms": fixed(3), "mean_ms": fixed(3), "pct": fixed(1), "gpu_ms": fixed(3), "gpu_span_ms": fixed(3)},
        notes,
    )


REPORT = Report(
    "phase_sum",
    "Application phases",
    compute,
    needs=("phases",),
    doc="per phase: instances, total and mean time, share of step time, GPU work launched inside",
)
