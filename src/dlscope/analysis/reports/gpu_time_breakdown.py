"""gpu_time_breakdown: per rank and GPU, where the GPU's time went: compute, memory,
communication, idle.

Definitions (HTA's temporal breakdown, extended by a memory/communication split):

* the **span** is the GPU timeline from the start of the first to the end of the last piece of
  GPU work (kernel, copy, set) of the selected steps, over all streams of the device;
* **idle** is the time in the span when nothing ran on any stream (HTA: span minus the merged
  execution time of all GPU work);
* every other instant is counted once, by precedence: **compute** when any compute kernel ran
  (whatever else overlapped it, as HTA's compute time is the merged time of its compute
  kernels), else **communication** when a collective kernel ran, else **memory** (copies, sets).
  So compute + communication + memory equals HTA's compute + non-compute time, and
  communication that overlaps compute counts as compute.

Comparison with HTA: ``tests/data/hta/temporal_breakdown.json`` holds HTA 0.5.0's
``get_temporal_breakdown`` on the three H100 fixtures and on HTA's own corpus, produced by
``tests/data/hta/make_reference.py`` (its docstring has the command). HTA reads whole
microseconds and drops the kernels launched in the trace's last ``ProfilerStep`` unless told
otherwise; the test selects the same steps here and requires every percentage to agree within
one percentage point.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql
from ..core.intervals import union_sql
from ..core.report import Report, ReportResult, fixed, integer

KEYS = "rank, device"


def breakdown_sql(work: str) -> str:
    """SQL: one row per (rank, device) with span_ns, compute_ns, communication_ns, memory_ns,
    idle_ns and work_items, from GPU work rows with a category column."""

    def busy(where: str) -> str:
        return (
            f"SELECT {KEYS}, sum(end_ns - start_ns)::BIGINT AS ns FROM"
            f" ({union_sql(f'SELECT * FROM w WHERE {where}', KEYS)}) GROUP BY ALL"
        )

    return f"""
    WITH w AS MATERIALIZED ({work}),
         span AS (SELECT {KEYS}, (max(end_ns) - min(start_ns))::BIGINT AS span_ns, count(*) AS work_items
                  FROM w GROUP BY ALL),
         b AS ({busy("TRUE")}), c AS ({busy("category = 'compute'")}),
         cc AS ({busy("category IN ('compute', 'communication')")})
    SELECT s.rank, s.device, s.span_ns, s.work_items,
           coalesce(c.ns, 0) AS compute_ns,
           coalesce(cc.ns, 0) - coalesce(c.ns, 0) AS communication_ns,
           b.ns - coalesce(cc.ns, 0) AS memory_ns,
           s.span_ns - b.ns AS idle_ns
    FROM span s JOIN b USING ({KEYS}) LEFT JOIN c USING ({KEYS}) LEFT JOIN cc USING ({KEYS})"""


def compute(data: ProfileData) -> ReportResult:
    work = gpu_work_sql(data)
    notes = [
        "compute > communication > memory: an instant counts once, for the first of these that ran; "
        "idle = no GPU work on any stream, between the first and the last GPU work of the selection"
    ]
    if work is None:
        return ReportResult("gpu_time_breakdown", REPORT.title, _empty(), FORMATS, ["the profile has no GPU activity"])
    table = data.table(f"""
        SELECT rank, device, span_ns / 1e6 AS span_ms,
               compute_ns / 1e6 AS compute_ms, communication_ns / 1e6 AS communication_ms,
               memory_ns / 1e6 AS memory_ms, idle_ns / 1e6 AS idle_ms,
               100.0 * compute_ns / nullif(span_ns, 0) AS compute_pct,
               100.0 * communication_ns / nullif(span_ns, 0) AS communication_pct,
               100.0 * memory_ns / nullif(span_ns, 0) AS memory_pct,
               100.0 * idle_ns / nullif(span_ns, 0) AS idle_pct,
               work_items
        FROM ({breakdown_sql(work)}) ORDER BY rank, device""")
    n = gpu_step_count(data)
    if n is not None:
        notes.append(f"GPU work launched in {n} selected step{'s' if n != 1 else ''}")
    if not table.num_rows:
        notes.append("no GPU work in the selected steps")
    return ReportResult("gpu_time_breakdown", REPORT.title, table, FORMATS, notes)


def _empty() -> pa.Table:
    return pa.table({c: pa.array([], pa.float64()) for c in ("span_ms", "compute_ms", "idle_ms")})


FORMATS = {
    **{c: fixed(3) for c in ("span_ms", "compute_ms", "communication_ms", "memory_ms", "idle_ms")},
    **{c: fixed(1) for c in ("compute_pct", "communication_pct", "memory_pct", "idle_pct")},
    "work_items": integer(True),
}

REPORT = Report(
    "gpu_time_breakdown",
    "GPU time: compute, communication, memory, idle",
    compute,
    needs=("kernels",),
    doc=(
        "per rank and GPU: the span from first to last GPU work of the selected steps, split into "
        "compute, communication, memory and idle (HTA's temporal breakdown)"
    ),
)
