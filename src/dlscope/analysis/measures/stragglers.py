"""Stragglers in the traced steps: per step recorded on two or more ranks, the rank that arrived
last (:func:`dlscope.analysis.reports.straggler.stragglers_sql`: the others waited for it at their
collectives, or, without matched collectives, it ran the longest step), its lag, and the phase
in which it lost most time against the other ranks' median
(:func:`dlscope.analysis.reports.straggler.phase_excess_sql`).

The untraced steps' verdict is :func:`dlscope.analysis.reports.rank_waits.untraced_straggler`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..reports.straggler import phase_excess_sql, stragglers_sql
from . import measured


@dataclass(frozen=True)
class StragglerStep:
    """One traced step's straggler."""

    step: int
    rank: int
    basis: str  # 'waits' (the others waited at collectives) or step lengths
    lag_ms: float
    step_ms: float
    phase: str | None  # where it lost most time, when it lost any there
    phase_excess_ms: float | None


@measured
def ranks_with_steps(data: ProfileData) -> int:
    """How many ranks have selected steps."""
    return int(data.scalar("SELECT count(DISTINCT rank) FROM sel_steps") or 0)


@measured
def traced_step_selected(data: ProfileData) -> bool:
    """Whether the selected steps include a traced one."""
    return bool(data.scalar("SELECT count(*) FROM sel_steps WHERE traced"))


@measured
def traced_stragglers(data: ProfileData) -> tuple[StragglerStep, ...]:
    """The straggler of each step recorded on two or more ranks, by step."""
    rows = data.rows(f"""
        WITH s AS MATERIALIZED ({stragglers_sql(data)})
        SELECT s.step, s.straggler AS rank, s.basis, s.lag_ns / 1e6 AS lag_ms, s.step_ns / 1e6 AS step_ms,
               CASE WHEN e.phase_excess_ns > 0 THEN e.phase END AS phase,
               CASE WHEN e.phase_excess_ns > 0 THEN e.phase_excess_ns / 1e6 END AS phase_excess_ms
        FROM s LEFT JOIN ({phase_excess_sql(data, "SELECT * FROM s")}) e USING (step) ORDER BY s.step""")
    return tuple(StragglerStep(**r) for r in rows)
