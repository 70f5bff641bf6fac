"""step_sum: one row per step: its duration and what it was made of."""

from __future__ import annotations

from ..errors import NoStepsError
from .context import ProfileData
from .iterations import no_steps_message
from .report import Report, ReportResult, fixed


def compute(data: ProfileData) -> ReportResult:
    if not int(data.scalar("SELECT count(*) FROM steps") or 0):
        raise NoStepsError(no_steps_message(data.selection.key_node))
    gpu_cols, gpu_join = "", ""
    if data.has("kernels"):
        gpu_cols = ", coalesce(k.kernels, 0) AS kernels, coalesce(k.kernel_ns, 0) / 1e6 AS kernel_ms"
        gpu_join = """LEFT JOIN (SELECT rank, step, count(*) AS kernels, sum(end_ns - start_ns)::BIGINT AS kernel_ns
                                 FROM kernels GROUP BY ALL) k USING (rank, step)"""
    table = data.table(f"""
        WITH top AS (
            SELECT rank, step, sum(end_ns - start_ns)::BIGINT AS ns FROM phases
            WHERE kind = 'range' AND depth = 0 AND coalesce(domain, '') NOT IN ('process', 'torch', 'trace') GROUP BY ALL)
        SELECT s.rank, s.step, s.warmup, s.traced, (s.end_ns - s.start_ns) / 1e6 AS duration_ms,
               coalesce(top.ns, 0) / 1e6 AS in_phases_ms,
               ((s.end_ns - s.start_ns) - coalesce(top.ns, 0)) / 1e6 AS outside_phases_ms {gpu_cols}
        FROM sel_steps s LEFT JOIN top USING (rank, step) {gpu_join}
        ORDER BY s.rank, s.step""")
    fmt = {c: fixed(3) for c in ("duration_ms", "in_phases_ms", "outside_phases_ms", "kernel_ms")}
    return ReportResult("step_sum", REPORT.title, table, fmt)


REPORT = Report("step_sum", "Per-step duration and composition", compute, needs_steps=True,
                doc="duration of each selected step, time inside top-level phases and outside them, "
                    "kernels launched in the step and their summed time")
