"""high_step_variance: step times are unstable; which steps are slow, and which phase makes them
slow (DLProf's "iteration range" advice: statistics over unstable steps mislead).

Measured over the timed steps (``stat_steps``): the coefficient of variation of the step time,
the slowest steps against the median, and per phase the extra time it took in each slow step
over its own median: the phase that grows in the slow steps is what varies.

Saving (upper bound): the mean of each step's excess over the median step, Σ max(0, t - median) / n:
what the mean step would lose if every slower step ran at the median.
"""

from __future__ import annotations

import re

from ..analysis.core.host_state import DATA_LOADING_RE
from ..analysis.core.phases import shown_phases_sql
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct

# dlscope's own lines: below 5 timed steps a spread says nothing; a standard deviation under 10%
# of the mean is ordinary jitter for a training step.
MIN_STEPS = 5
MIN_CV = 0.10
TOP = 5
URL = "https://pytorch.org/docs/stable/notes/faq.html"


class HighStepVariance(Rule):
    id = "high_step_variance"
    judges_untraced = True  # step times / NVML samples of every step
    symptom = True  # an effect: its causes have rules of their own
    title = "Step times vary a lot"
    description = "unstable step times: which steps are slow and which phase grows in them"
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        if ctx.basis.stat_steps < MIN_STEPS:
            return f"{ctx.basis.stat_steps} timed step{'s' if ctx.basis.stat_steps != 1 else ''} (needs {MIN_STEPS})"
        return None

    def check(self, ctx: Context) -> Finding | None:
        d = ctx.data
        s = d.rows("""SELECT avg(t) AS mean, stddev_samp(t) AS std, quantile_cont(t, 0.5) AS med, count(*) AS n
                      FROM (SELECT (end_ns - start_ns) / 1e6 AS t FROM stat_steps)""")[0]
        cv = s["std"] / s["mean"] if s["mean"] else 0.0
        excess = d.scalar(f"""SELECT sum(greatest(0, (end_ns - start_ns) / 1e6 - {s['med']})) / count(*)
                              FROM stat_steps""") or 0.0
        p = ctx.pct(excess)
        if cv < MIN_CV or p is None or p < MIN_SAVING_PCT:
            return None
        slow = d.rows(f"""SELECT rank, step, (end_ns - start_ns) / 1e6 AS step_ms,
                                 (end_ns - start_ns) / 1e6 - {s['med']} AS over_median_ms
                          FROM stat_steps ORDER BY step_ms DESC LIMIT {TOP}""")
        grow = _phase_growth(ctx)
        for r in slow:
            g = grow.get((r["rank"], r["step"]))
            r["phase_that_grew"], r["phase_over_its_median_ms"] = (g["name"], g["over"]) if g else (None, None)
            del r["rank"]
        varying = _most_varying_phase(ctx)
        worst = slow[0]
        text = (f"over {s['n']} timed steps the step time has a standard deviation of {ms(s['std'])} "
                f"({pct(100 * cv)} of the {ms(s['mean'])} mean); the slowest, step {worst['step']}, took "
                f"{ms(worst['step_ms'])} against a median of {ms(s['med'])}"
                + (f", {ms(worst['phase_over_its_median_ms'])} of it in '{worst['phase_that_grew']}'"
                   if worst["phase_that_grew"] else "")
                + (f"; '{varying[0]}' varies most (std {ms(varying[1])})" if varying else ""))
        how = (f"if every step slower than the median ran at the median, the mean step would be {ms(excess)} shorter")
        return self.finding(ctx, excess, Evidence(text, how, slow), _advice(ctx, varying, slow), url=URL)


def _phase_growth(ctx: Context) -> dict[tuple[int, int], dict]:
    """Per timed step, the phase that exceeded its own median time the most, and by how much."""
    d = ctx.data
    if not d.has("phases"):
        return {}
    rows = d.rows(f"""
        WITH p AS (SELECT p.rank, p.step, p.name, sum(p.end_ns - p.start_ns) / 1e6 AS ms
                   FROM ({shown_phases_sql(d)}) p SEMI JOIN stat_steps s ON s.rank = p.rank AND s.step = p.step
                   WHERE p.depth = 0 GROUP BY ALL),
             m AS (SELECT name, quantile_cont(ms, 0.5) AS med FROM p GROUP BY name)
        SELECT p.rank, p.step, arg_max(p.name, p.ms - m.med) AS name, max(p.ms - m.med) AS over
        FROM p JOIN m USING (name) GROUP BY ALL""")
    return {(r["rank"], r["step"]): r for r in rows if r["over"] and r["over"] > 0}


def _most_varying_phase(ctx: Context) -> tuple[str, float] | None:
    d = ctx.data
    if not d.has("phases"):
        return None
    r = d.rows(f"""
        WITH p AS (SELECT p.rank, p.step, p.name, sum(p.end_ns - p.start_ns) / 1e6 AS ms
                   FROM ({shown_phases_sql(d)}) p SEMI JOIN stat_steps s ON s.rank = p.rank AND s.step = p.step
                   WHERE p.depth = 0 GROUP BY ALL)
        SELECT name, stddev_samp(ms) AS sd FROM p GROUP BY name HAVING count(*) > 1 ORDER BY sd DESC LIMIT 1""")
    return (r[0]["name"], float(r[0]["sd"])) if r and r[0]["sd"] else None


def _advice(ctx: Context, varying: tuple[str, float] | None, slow: list[dict]) -> str:
    slow_steps = ", ".join(str(r["step"]) for r in slow[:3])
    name = varying[0] if varying else (slow[0].get("phase_that_grew") or "")
    iteration = (f" Meanwhile, judge changes on the median step or a steady range (dlscope summary PATH --iter-start N "
                 f"--iter-stop M), leaving out steps {slow_steps} if they are not part of the steady state.")
    if name and re.search(DATA_LOADING_RE, name.lower()):
        first = (f"'{name}' takes a different time every step: the input pipeline is not keeping a buffer ahead of the "
                 f"{'GPU' if ctx.data.has('kernels') else 'step'}. Prepare batches in the background (DataLoader workers with prefetch_factor >= 2, "
                 "persistent_workers=True) so their jitter is absorbed.")
    elif name:
        first = (f"'{name}' grows in the slow steps (steps {slow_steps}): look there for periodic work (logging, "
                 "checkpointing, evaluation, Python garbage collection: gc.freeze() after start-up) or for "
                 "data-dependent shapes that change the work per step.")
    else:
        first = (f"Steps {slow_steps} are slow without a phase to blame: wrap the loop's parts in dlscope phases "
                 "(with prof.phase('name'):) to see which one varies.")
    return first + iteration


RULE = HighStepVariance()
