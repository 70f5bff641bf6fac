"""The longest stretch each GPU window's GPU sat idle, and the top-level phase the host was in at
its middle (the place a reader should look)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.gpu_work import gpu_islands_sql, gpu_work_sql
from ..core.phases import shown_phases_sql
from . import measured
from .basis import gpu_windows_table


@dataclass(frozen=True)
class LongestGap:
    """A GPU window's longest idle gap."""

    gap_ms: float
    host_phase: str | None


@measured
def longest_idle_gaps(data: ProfileData) -> dict[tuple[int, int | None], LongestGap]:
    """Per GPU window (rank, step), its longest idle gap: its length and the outermost phase the
    host was in at its middle."""
    work = gpu_work_sql(data, selected=False)
    if work is None:
        return {}
    w = gpu_windows_table(data)
    phase = "NULL::VARCHAR" if not data.has("phases") else "CASE WHEN p.end_ns > g.mid THEN p.name END"
    # the outermost phase shown in breakdowns (depth among those, not under the process's range)
    phase_join = (
        ""
        if not data.has("phases")
        else f"""
        ASOF LEFT JOIN (SELECT rank, start_ns, end_ns, name FROM ({shown_phases_sql(data)}) WHERE depth = 0) p
          ON p.rank = g.rank AND g.mid >= p.start_ns"""
    )
    rows = data.rows(f"""
        WITH isl AS (SELECT i.rank, {w}.step, greatest(i.start_ns, {w}.start_ns) AS s, least(i.end_ns, {w}.end_ns) AS e,
                            {w}.start_ns AS ws, {w}.end_ns AS we
                     FROM ({gpu_islands_sql(data)}) i
                     JOIN {w} ON {w}.rank = i.rank AND i.start_ns < {w}.end_ns AND i.end_ns > {w}.start_ns),
             gaps AS (
                SELECT rank, step, coalesce(lag(e) OVER (PARTITION BY rank, step ORDER BY s), ws) AS start_ns,
                       s AS end_ns, ws FROM isl
                UNION ALL
                SELECT rank, step, max(e), any_value(we), any_value(ws) FROM isl GROUP BY rank, step),
             g AS (SELECT *, (start_ns + end_ns) // 2 AS mid FROM gaps WHERE end_ns > start_ns
                   QUALIFY row_number() OVER (PARTITION BY rank, step ORDER BY end_ns - start_ns DESC) = 1)
        SELECT g.rank, g.step, (g.end_ns - g.start_ns) / 1e6 AS gap_ms, {phase} AS host_phase
        FROM g {phase_join}""")
    return {(r["rank"], r["step"]): LongestGap(r["gap_ms"], r["host_phase"]) for r in rows}
