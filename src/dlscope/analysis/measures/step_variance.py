"""How much the timed steps vary: their mean, spread and median, the time above the median, the
slowest steps with the top-level phase that grew most in each, and the phase that varies most."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.context import ProfileData
from ..core.phases import shown_phases_sql
from . import measured


@dataclass(frozen=True)
class StepSpread:
    """The timed steps' times (ms)."""

    n: int
    mean_ms: float | None
    std_ms: float | None
    median_ms: float | None
    excess_ms: float  # mean over the steps of each step's time above the median


@dataclass(frozen=True)
class SlowStep:
    """One of the slowest timed steps (fields in the evidence's column order)."""

    step: int
    step_ms: float
    over_median_ms: float
    phase_that_grew: str | None  # the top-level phase most above its own median in this step
    phase_over_its_median_ms: float | None


@measured
def step_spread(data: ProfileData) -> StepSpread:
    """Mean, standard deviation, median and excess over the median of the timed steps."""
    s = data.rows("""SELECT avg(t) AS mean, stddev_samp(t) AS std, quantile_cont(t, 0.5) AS med, count(*) AS n
                     FROM (SELECT (end_ns - start_ns) / 1e6 AS t FROM stat_steps)""")[0]
    excess = (
        data.scalar(f"""SELECT sum(greatest(0, (end_ns - start_ns) / 1e6 - {s["med"]})) / count(*)
                             FROM stat_steps""")
        or 0.0
    )
    return StepSpread(int(s["n"]), s["mean"], s["std"], s["med"], excess)


@measured
def slow_steps(data: ProfileData, top: int) -> tuple[SlowStep, ...]:
    """The ``top`` slowest timed steps, slowest first, each with the phase that grew most in it."""
    med = step_spread(data).median_ms
    slow = data.rows(f"""SELECT rank, step, (end_ns - start_ns) / 1e6 AS step_ms,
                                (end_ns - start_ns) / 1e6 - {med} AS over_median_ms
                         FROM stat_steps ORDER BY step_ms DESC LIMIT {top}""")
    grow = _phase_growth(data)
    out = []
    for r in slow:
        g = grow.get((r["rank"], r["step"]))
        out.append(
            SlowStep(r["step"], r["step_ms"], r["over_median_ms"], g["name"] if g else None, g["over"] if g else None)
        )
    return tuple(out)


def _top_phases_per_step_sql(data: ProfileData) -> str:
    return f"""SELECT p.rank, p.step, p.name, sum(p.end_ns - p.start_ns) / 1e6 AS ms
               FROM ({shown_phases_sql(data)}) p SEMI JOIN stat_steps s ON s.rank = p.rank AND s.step = p.step
               WHERE p.depth = 0 GROUP BY ALL"""


def _phase_growth(data: ProfileData) -> dict[tuple[int, int], dict[str, Any]]:
    """Per timed step, the phase that exceeded its own median time the most, and by how much."""
    if not data.has("phases"):
        return {}
    rows = data.rows(f"""
        WITH p AS ({_top_phases_per_step_sql(data)}),
             m AS (SELECT name, quantile_cont(ms, 0.5) AS med FROM p GROUP BY name)
        SELECT p.rank, p.step, arg_max(p.name, p.ms - m.med) AS name, max(p.ms - m.med) AS over
        FROM p JOIN m USING (name) GROUP BY ALL""")
    return {(r["rank"], r["step"]): r for r in rows if r["over"] and r["over"] > 0}


@measured
def most_varying_phase(data: ProfileData) -> tuple[str, float] | None:
    """The top-level phase whose time per timed step has the largest standard deviation (ms)."""
    if not data.has("phases"):
        return None
    r = data.rows(f"""
        WITH p AS ({_top_phases_per_step_sql(data)})
        SELECT name, stddev_samp(ms) AS sd FROM p GROUP BY name HAVING count(*) > 1 ORDER BY sd DESC LIMIT 1""")
    return (r[0]["name"], float(r[0]["sd"])) if r and r[0]["sd"] else None
