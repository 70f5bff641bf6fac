"""rank_balance: load imbalance across ranks.

Per rank over the selected steps: mean step time, the time it waited for other ranks at
collectives (see :mod:`.comm_wait`), and its ``work``: the step time less that wait, the time
the rank was busy with its own share. ``work_vs_mean_pct`` compares it with the mean over
ranks; the job's imbalance (HTA and DeepSpeed state it the same way) is the largest work over
the mean work, minus one: the share of every step the other ranks lose to the slowest.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.report import Report, ReportResult, fixed, integer
from .straggler import per_rank_step_sql


def compute(data: ProfileData) -> ReportResult:
    if int(data.scalar("SELECT count(DISTINCT rank) FROM sel_steps") or 0) < 2:
        return ReportResult(
            "rank_balance",
            REPORT.title,
            pa.table({"rank": pa.array([], pa.int32())}),
            FORMATS,
            ["fewer than two ranks with steps: nothing to compare"],
        )
    table = data.table(f"""
        WITH r AS ({per_rank_step_sql(data)}),
             full_steps AS (SELECT step FROM r GROUP BY step HAVING count(wait_ns) = count(*)),
             pr AS (SELECT rank, count(*) AS steps, avg(step_ns) AS step_ns,
                           avg(wait_ns) FILTER (WHERE step IN (SELECT step FROM full_steps)) AS wait_ns,
                           avg(step_ns - wait_ns) FILTER (WHERE step IN (SELECT step FROM full_steps)) AS work_ns
                    FROM r GROUP BY rank)
        SELECT rank, steps, step_ns / 1e6 AS step_ms, wait_ns / 1e6 AS wait_ms, work_ns / 1e6 AS work_ms,
               100.0 * (work_ns / avg(work_ns) OVER () - 1) AS work_vs_mean_pct,
               100.0 * (max(work_ns) OVER () / avg(work_ns) OVER () - 1) AS imbalance_pct
        FROM pr ORDER BY rank""")
    notes = [
        "work = step time minus the wait for other ranks at collectives (steps with matched collectives); "
        "imbalance_pct = slowest rank's work over the mean work, minus one"
    ]
    return ReportResult("rank_balance", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "steps": integer(),
    "step_ms": fixed(3),
    "wait_ms": fixed(3),
    "work_ms": fixed(3),
    "work_vs_mean_pct": fixed(1),
    "imbalance_pct": fixed(1),
}

REPORT = Report(
    "rank_balance",
    "Load balance across ranks",
    compute,
    needs_steps=True,
    needs_ranks=2,
    doc="per rank: step time, wait for other ranks at collectives, own work, and the job's imbalance",
)
