"""step_sum: one row per step: its duration and what it was made of."""

from __future__ import annotations

from ...errors import NoStepsError
from ..core.context import ProfileData
from ..core.intervals import covered_sql, union_sql
from ..core.iterations import no_steps_message
from ..core.phases import EXCLUDED_DOMAINS
from ..core.report import Report, ReportResult, fixed


def compute(data: ProfileData) -> ReportResult:
    if not int(data.scalar("SELECT count(*) FROM steps") or 0):
        raise NoStepsError(no_steps_message(data.selection.key_node))
    gpu_cols, gpu_join = "", ""
    if data.has("kernels"):
        gpu_cols = ", coalesce(k.kernels, 0) AS kernels, coalesce(k.kernel_ns, 0) / 1e6 AS kernel_ms"
        gpu_join = """LEFT JOIN (SELECT rank, step, count(*) AS kernels, sum(end_ns - start_ns)::BIGINT AS kernel_ns
                                 FROM kernels GROUP BY ALL) k USING (rank, step)"""
    # the part of each step that the phases a breakdown shows cover, on any thread of the rank.
    # Not 'phases at depth 0': the wrappers left out (the whole run, dlscope's tracing window)
    # push the user's phases a level down, and the traced steps then had no phase time; and a
    # phase that runs past its step's end (a step marked inside it) must not count twice.
    excluded = ", ".join(f"'{d}'" for d in EXCLUDED_DOMAINS)
    islands = union_sql(
        f"""SELECT rank, start_ns, end_ns FROM phases
                           WHERE kind = 'range' AND coalesce(domain, '') NOT IN ({excluded})""",
        "rank",
    )
    covered = covered_sql("SELECT rank, step, start_ns, end_ns FROM sel_steps", islands, ("rank",))
    table = data.table(f"""
        WITH top AS ({covered})
        SELECT s.rank, s.step, s.warmup, s.traced, (s.end_ns - s.start_ns) / 1e6 AS duration_ms,
               coalesce(top.covered_ns, 0) / 1e6 AS in_phases_ms,
               ((s.end_ns - s.start_ns) - coalesce(top.covered_ns, 0)) / 1e6 AS outside_phases_ms {gpu_cols}
        FROM sel_steps s LEFT JOIN top USING (rank, step) {gpu_join}
        ORDER BY s.rank, s.step""")
    fmt = {c: fixed(3) for c in ("duration_ms", "in_phases_ms", "outside_phases_ms", "kernel_ms")}
    return ReportResult("step_sum", REPORT.title, table, fmt)


REPORT = Report(
    "step_sum",
    "Per-step duration and composition",
    compute,
    needs_steps=True,
    doc=(
        "duration of each selected step, the part of it inside the application's phases (dlscope's "
        "tracing window and the whole run's phase are not phases of the step) and the rest, "
        "kernels launched in the step and their summed time"
    ),
)
