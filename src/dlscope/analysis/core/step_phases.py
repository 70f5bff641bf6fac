"""Per-step tables of the steps that timing statistics cover (``stat_steps``): durations, and each
step split into the outermost phases that ran on the step's own thread (phases of other threads
overlap them and are not added up)."""

from __future__ import annotations

import pyarrow as pa

from .context import ProfileData
from .intervals import overlaps_sql
from .phases import shown_phases_sql


def step_phases(data: ProfileData) -> pa.Table:
    """Rows (step, duration_ns, phase, ns) for the statistics steps of the first rank; ``phase`` is
    NULL for the part of the step outside every phase."""
    shown = shown_phases_sql(data)
    return data.table(f"""
        WITH s AS (SELECT * FROM stat_steps WHERE rank = (SELECT min(rank) FROM stat_steps)),
        p AS (SELECT step, name, sum(ns)::BIGINT AS ns FROM ({
        overlaps_sql(
            "SELECT * FROM s",
            f"SELECT * FROM ({shown}) WHERE depth = 0 AND rank = (SELECT min(rank) FROM stat_steps)",
            "a.step, b.name, least(b.end_ns, a.end_ns) - greatest(b.start_ns, a.start_ns) AS ns, "
            "a.tid AS s_tid, b.tid AS p_tid, a.pid AS s_pid, b.pid AS p_pid",
        )
    })
              WHERE (s_tid IS NULL OR p_tid = s_tid) AND (s_pid IS NULL OR p_pid = s_pid)
              GROUP BY ALL),
        inside AS (SELECT step, sum(ns)::BIGINT AS ns FROM p GROUP BY step)
        SELECT s.step, s.end_ns - s.start_ns AS duration_ns, p.name AS phase, p.ns FROM s JOIN p USING (step)
        UNION ALL
        SELECT s.step, s.end_ns - s.start_ns, NULL, greatest(0, (s.end_ns - s.start_ns) - coalesce(i.ns, 0))
        FROM s LEFT JOIN inside i USING (step)
        ORDER BY 1, 3 NULLS LAST""")


def step_durations(data: ProfileData) -> pa.Table:
    """(step, duration_ns) of the statistics steps of the first rank, in step order."""
    return data.table("""SELECT step, end_ns - start_ns AS duration_ns FROM stat_steps
                         WHERE rank = (SELECT min(rank) FROM stat_steps) ORDER BY step""")
