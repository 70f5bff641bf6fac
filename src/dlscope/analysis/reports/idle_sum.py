"""idle_sum: why the GPU sat idle, from what the host was doing at the time.

The idle time is ``gpu_time_breakdown``'s: the gaps between the first and the last GPU work of
the selected steps when nothing ran on any stream of the device.

A gap whose next work had already been launched when the gap began (its launch call had
returned) is not the host's doing: the queue was not empty, the GPU waited on itself (the
latency between dependent kernels, a wait on another stream). Such a gap is **other** as a whole.
In every other gap the queue had run dry, and each instant gets one cause from the state of the
rank's main process (see :mod:`.host_state`), by precedence:

1. **input**: the host was in a data-loading phase: the GPU waited for the next batch;
2. **sync**: the host was blocked in a synchronizing call, or had returned from one and not yet
   launched again: the sync had drained the GPU's queue;
3. **launch**: the host was busy with other recorded work (ops, runtime calls, phases): the GPU
   ran dry while the host was still preparing or launching the next work (CPU-bound);
4. **other**: no recorded host activity (untraced Python, another thread, or an idle host).

``gaps`` counts the idle intervals whose largest part has that cause.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql
from ..core.host_state import classes_union_sql, host_ctes, main_pid_sql
from ..core.intervals import covered_sql, union_sql
from ..core.report import Report, ReportResult, fixed, integer

CAUSES = ("input", "sync", "launch", "other")
KEYS = "rank, device"


def gaps_sql(data: ProfileData, work: str) -> str:
    """SQL: idle gaps (rank, device, start_ns, end_ns) between the islands of GPU work, with
    ``queued``: the work that ended the gap had been launched (its launch call had returned)
    before the gap began."""
    launched = "NULL::BIGINT"
    join = ""
    if data.has("api"):
        launched = "a.end_ns"
        join = """LEFT JOIN (SELECT rank, correlation_id, min(end_ns) AS end_ns FROM raw_api
                             WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                    ON a.rank = w.rank AND a.correlation_id = w.correlation_id"""
    return f"""
    WITH w AS MATERIALIZED ({work}),
         nxt AS (SELECT w.rank, w.device, w.start_ns, min({launched}) AS launched_ns FROM w {join} GROUP BY ALL)
    SELECT g.rank, g.device, g.start_ns, g.end_ns, coalesce(n.launched_ns <= g.start_ns, FALSE) AS queued FROM (
        SELECT rank, device, end_ns AS start_ns, next_start AS end_ns FROM (
            SELECT *, lead(start_ns) OVER (PARTITION BY {KEYS} ORDER BY start_ns) AS next_start
            FROM ({union_sql("SELECT * FROM w", KEYS)}))
        WHERE next_start > end_ns) g
    LEFT JOIN nxt n ON n.rank = g.rank AND n.device = g.device AND n.start_ns = g.end_ns"""


def classified_gaps_sql(data: ProfileData, work: str) -> str:
    """SQL: each gap with input_ns, sync_ns, launch_ns, other_ns (summing to its length)."""
    # c1, c2, c3: how much of the gap the cumulative host classes cover; differences give each cause
    cumulative = (("c1", ("input",)), ("c2", ("input", "sync")), ("c3", ("input", "sync", "busy")))
    covered = [
        f"""{name} AS (SELECT gid, covered_ns AS ns FROM ({
            covered_sql("SELECT gid, rank, start_ns, end_ns FROM gaps", classes_union_sql(classes), ("rank",))
        }))"""
        for name, classes in cumulative
    ]
    return f"""
    WITH {host_ctes(data)},
         gaps AS MATERIALIZED (SELECT row_number() OVER () AS gid, * FROM ({gaps_sql(data, work)})),
         {", ".join(covered)}
    SELECT rank, device, start_ns, end_ns,
           CASE WHEN queued THEN 0 ELSE c1.ns END AS input_ns,
           CASE WHEN queued THEN 0 ELSE c2.ns - c1.ns END AS sync_ns,
           CASE WHEN queued THEN 0 ELSE c3.ns - c2.ns END AS launch_ns,
           (end_ns - start_ns) - CASE WHEN queued THEN 0 ELSE c3.ns END AS other_ns
    FROM gaps JOIN c1 USING (gid) JOIN c2 USING (gid) JOIN c3 USING (gid)"""


def compute(data: ProfileData) -> ReportResult:
    work = gpu_work_sql(data)
    if work is None:
        return ReportResult(
            "idle_sum",
            REPORT.title,
            pa.table({"cause": pa.array([], pa.string())}),
            FORMATS,
            ["the profile has no GPU activity"],
        )
    n_steps = gpu_step_count(data)
    per_step = f"/ {n_steps}" if n_steps else "* NULL"
    unpivot = " UNION ALL ".join(
        f"SELECT rank, device, '{c}' AS cause, {i} AS ord, {c}_ns AS ns, "
        f"greatest({', '.join(f'{o}_ns' for o in CAUSES)}) = {c}_ns AND {c}_ns > 0 AS dominant FROM g"
        for i, c in enumerate(CAUSES)
    )
    table = data.table(f"""
        WITH g AS MATERIALIZED ({classified_gaps_sql(data, work)}),
             span AS (SELECT {KEYS}, max(end_ns) - min(start_ns) AS span_ns FROM ({work}) GROUP BY ALL),
             u AS ({unpivot}),
             causes AS (SELECT rank, device, cause, ord FROM span,
                 (VALUES {", ".join(f"('{c}', {i})" for i, c in enumerate(CAUSES))}) v(cause, ord))
        SELECT c.rank, c.device, c.cause, coalesce(sum(u.ns), 0)::BIGINT / 1e6 AS idle_ms,
               coalesce(sum(u.ns), 0)::BIGINT / 1e6 {per_step} AS per_step_ms,
               100.0 * coalesce(sum(u.ns), 0)
                   / nullif(sum(sum(u.ns)) OVER (PARTITION BY c.rank, c.device), 0) AS idle_pct,
               100.0 * coalesce(sum(u.ns), 0) / nullif(any_value(s.span_ns), 0) AS span_pct,
               count(*) FILTER (WHERE u.dominant) AS gaps
        FROM causes c JOIN span s USING ({KEYS})
        LEFT JOIN u ON u.rank = c.rank AND u.device = c.device AND u.cause = c.cause
        GROUP BY c.rank, c.device, c.cause, c.ord ORDER BY c.rank, c.device, c.ord""")
    notes = [
        (
            "causes by precedence: input (data-loading phase) > sync (blocked in or just back from a sync, "
            "until the next launch) > launch (host busy with other work) > other (no recorded host activity, "
            "or the next work was already queued: a GPU-side gap)"
        ),
        "idle_pct: share of the GPU's idle time; span_pct: share of the GPU span (first to last GPU work)",
    ]
    if not data.has("phases"):
        notes.append("the profile has no phases: data loading cannot be told apart")
    if not data.has("api") and not data.has("sync"):
        notes.append("the profile has no runtime calls: syncs cannot be told apart")
    mp = data.rows(f"SELECT rank, pid FROM ({main_pid_sql(data)}) ORDER BY rank")
    if mp:
        notes.append("host state from the main process: " + ", ".join(f"rank {r['rank']} pid {r['pid']}" for r in mp))
    return ReportResult("idle_sum", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "idle_ms": fixed(3),
    "per_step_ms": fixed(3),
    "idle_pct": fixed(1),
    "span_pct": fixed(1),
    "gaps": integer(True),
}

REPORT = Report(
    "idle_sum",
    "GPU idle time by cause",
    compute,
    needs=("kernels",),
    doc="GPU idle time split by what the host was doing: data loading, synchronization, launching (CPU-bound), other",
)
