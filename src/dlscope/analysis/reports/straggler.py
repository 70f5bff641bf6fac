"""straggler: in each step, the rank the others waited for, by how much, and the phase that made
it late.

With collectives, ranks run in lock step, so every rank's step lasts about as long: the slow rank
does not show in step times but in waits. Per step, the straggler is the rank that waited least
for the others at its collectives (it arrived last; see :mod:`.comm_wait`), and ``lag_ms`` is how
much longer the other ranks waited (the median of their waits minus its own): the time a step
would save if the straggler were as fast as the others. The phase to blame is the straggler's
outermost phase (on its step's thread) that took longest compared with the same phase on the
other ranks (their median), time outside every phase counting as ``(outside phases)``.

Ranks that never meet at a collective (none recorded) are compared by step duration instead:
the slowest rank, ``lag_ms`` its excess over the median of the other ranks. When some steps have matched
collectives (the steps traced in detail) only those are reported: in lock step, the others'
durations differ by noise.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.comm_wait import matched_sql, step_wait_sql
from ..core.context import ProfileData
from ..core.intervals import covered_sql, union_sql
from ..core.report import Report, ReportResult, fixed, integer

OUTSIDE = "(outside phases)"


def per_rank_step_sql(data: ProfileData) -> str:
    """SQL: per (rank, step) of the selection: step_ns, wait_ns (NULL without matched
    collectives)."""
    wait = (
        step_wait_sql(data)
        if data.has("comms")
        else (
            "SELECT NULL::INTEGER AS rank, NULL::INTEGER AS step, NULL::BIGINT AS wait_ns, 0 AS collectives WHERE FALSE"
        )
    )
    return f"""SELECT s.rank, s.step, s.tid, (s.end_ns - s.start_ns)::BIGINT AS step_ns, w.wait_ns, w.collectives
               FROM sel_steps s LEFT JOIN ({wait}) w USING (rank, step)"""


def stragglers_sql(data: ProfileData) -> str:
    """SQL: one row per step recorded on two or more ranks: the straggler and its lag."""
    return f"""
    WITH r AS ({per_rank_step_sql(data)}),
         st AS (SELECT step, count(*) AS ranks, count(wait_ns) AS with_waits FROM r GROUP BY step
                HAVING count(*) >= 2
                   -- steps without collectives count only when no step has any: ranks in lock step
                   -- (collectives in some steps) differ in step time by noise alone
                   AND (count(wait_ns) = count(*) OR NOT EXISTS (SELECT 1 FROM r WHERE wait_ns IS NOT NULL))),
         pick AS (
            SELECT r.*, st.ranks, st.with_waits,
                   CASE WHEN st.with_waits = st.ranks
                        THEN row_number() OVER (PARTITION BY r.step ORDER BY r.wait_ns, r.step_ns DESC, r.rank)
                        ELSE row_number() OVER (PARTITION BY r.step ORDER BY r.step_ns DESC, r.rank) END AS pos
            FROM r JOIN st USING (step)),
         others AS (
            SELECT p.step, median(o.wait_ns) AS med_wait, median(o.step_ns) AS med_step
            FROM pick p JOIN r o ON o.step = p.step AND o.rank <> p.rank WHERE p.pos = 1 GROUP BY p.step)
    SELECT p.step, p.rank AS straggler, p.ranks, p.step_ns, p.wait_ns,
           CASE WHEN p.with_waits = p.ranks THEN 'waits' ELSE 'step_time' END AS basis,
           CASE WHEN p.with_waits = p.ranks THEN o.med_wait - p.wait_ns ELSE p.step_ns - o.med_step END AS lag_ns,
           p.tid
    FROM pick p JOIN others o USING (step) WHERE p.pos = 1"""


def phase_excess_sql(data: ProfileData, stragglers: str) -> str:
    """SQL: per step, the straggler's phase with the largest excess over the other ranks'
    median for the same phase (``(outside phases)`` for time outside every phase). Each rank's
    waits for the others are taken out of its phases first: the ranks that waited did so inside
    some phase, which would otherwise look as slow as the straggler's culprit."""
    waits = (
        f"SELECT rank, start_ns, start_ns + wait_ns AS end_ns FROM ({matched_sql(data)}) WHERE wait_ns > 0"
        if data.has("comms")
        else "SELECT NULL::INTEGER AS rank, 0::BIGINT AS start_ns, 0::BIGINT AS end_ns WHERE FALSE"
    )
    step_rows = (
        "SELECT rank, step, tid, start_ns, end_ns, (end_ns - start_ns)::BIGINT AS step_ns FROM sel_steps "
        "WHERE step IN (SELECT step FROM s)"
    )
    # the outermost phases of the step's thread, not counting dlscope's own ranges (the run, the
    # tracing window) that enclose them
    phase_rows = (
        "SELECT rank, step, name, start_ns, end_ns FROM ("
        "SELECT p.*, min(p.depth) OVER (PARTITION BY p.rank, p.step) AS top "
        "FROM phases p JOIN steps t ON t.rank = p.rank AND t.step = p.step AND t.tid = p.tid "
        "WHERE p.kind = 'range' AND coalesce(p.domain, '') NOT IN ('process', 'trace')) WHERE depth = top"
    )
    islands = "SELECT * FROM isl"
    return f"""
    WITH s AS MATERIALIZED ({stragglers}),
         isl AS MATERIALIZED ({union_sql(waits, "rank")}),
         steps AS MATERIALIZED (
            SELECT rank, step, tid, step_ns - covered_ns AS step_ns
            FROM ({covered_sql(step_rows, islands, ("rank",))})),
         ph AS (SELECT rank, step, name, sum(end_ns - start_ns - covered_ns)::BIGINT AS ns
                FROM ({covered_sql(phase_rows, islands, ("rank",))}) GROUP BY ALL),
         per AS (SELECT rank, step, name, ns FROM ph
                 UNION ALL
                 SELECT t.rank, t.step, '{OUTSIDE}', t.step_ns - coalesce(sum(ph.ns), 0)::BIGINT
                 FROM steps t LEFT JOIN ph USING (rank, step) GROUP BY t.rank, t.step, t.step_ns),
         names AS (SELECT DISTINCT step, name FROM per),
         grid AS (SELECT t.rank, t.step, n.name, coalesce(per.ns, 0) AS ns
                  FROM steps t JOIN names n USING (step) LEFT JOIN per USING (rank, step, name)),
         ex AS (SELECT s.step, g.name, g.ns - median(o.ns) AS excess_ns
                FROM s JOIN grid g ON g.step = s.step AND g.rank = s.straggler
                JOIN grid o ON o.step = s.step AND o.name = g.name AND o.rank <> s.straggler
                GROUP BY s.step, g.name, g.ns)
    SELECT step, arg_max(name, excess_ns) AS phase, max(excess_ns) AS phase_excess_ns FROM ex GROUP BY step"""


def compute(data: ProfileData) -> ReportResult:
    if int(data.scalar("SELECT count(DISTINCT rank) FROM sel_steps") or 0) < 2:
        return ReportResult(
            "straggler",
            REPORT.title,
            pa.table({"step": pa.array([], pa.int32())}),
            FORMATS,
            ["fewer than two ranks with steps: nothing to compare"],
        )
    s = stragglers_sql(data)
    table = data.table(f"""
        WITH s AS MATERIALIZED ({s})
        SELECT s.step, s.straggler AS slowest_rank, s.ranks, s.basis, s.lag_ns / 1e6 AS lag_ms,
               100.0 * s.lag_ns / nullif(s.step_ns, 0) AS lag_pct, s.step_ns / 1e6 AS step_ms,
               s.wait_ns / 1e6 AS own_wait_ms,
               CASE WHEN e.phase_excess_ns > 0 THEN e.phase END AS phase,
               CASE WHEN e.phase_excess_ns > 0 THEN e.phase_excess_ns / 1e6 END AS phase_excess_ms
        FROM s LEFT JOIN ({phase_excess_sql(data, "SELECT * FROM s")}) e USING (step)
        ORDER BY s.step""")
    notes = [
        (
            "slowest_rank: the rank the others waited for at the step's collectives (basis 'waits'), or the "
            "longest step (basis 'step_time'); lag_ms: how much longer the others waited for it (or its excess "
            "over the median step)"
        ),
        "phase: the straggler's phase that took longest compared with the other ranks",
    ]
    return ReportResult("straggler", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "lag_ms": fixed(3),
    "lag_pct": fixed(1),
    "step_ms": fixed(3),
    "own_wait_ms": fixed(3),
    "phase_excess_ms": fixed(3),
    "ranks": integer(),
}

REPORT = Report(
    "straggler",
    "Stragglers: the rank each step waited for",
    compute,
    needs_steps=True,
    needs_ranks=2,
    doc=(
        "per step: the slowest rank (the one the others waited for at collectives), by how much, "
        "and the phase that made it slow"
    ),
)
