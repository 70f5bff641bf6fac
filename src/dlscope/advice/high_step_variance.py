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
from dataclasses import asdict
from typing import Any

from ..analysis.core.host_state import DATA_LOADING_RE
from ..analysis.measures.step_variance import most_varying_phase, slow_steps, step_spread
from ..vocabulary.names import RuleId
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
    id = RuleId.HIGH_STEP_VARIANCE
    no_try_fix = "a symptom of uneven steps: the fixes of their causes are what a run can test"
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
        s = step_spread(ctx.data)
        cv = s.std_ms / s.mean_ms if s.mean_ms and s.std_ms is not None else 0.0
        excess = s.excess_ms
        p = ctx.pct(excess)
        if cv < MIN_CV or p is None or p < MIN_SAVING_PCT:
            return None
        slow = [asdict(r) for r in slow_steps(ctx.data, TOP)]
        varying = most_varying_phase(ctx.data)
        worst = slow[0]
        text = (
            f"over {s.n} timed steps the step time has a standard deviation of {ms(s.std_ms)} "
            f"({pct(100 * cv)} of the {ms(s.mean_ms)} mean); the slowest, step {worst['step']}, took "
            f"{ms(worst['step_ms'])} against a median of {ms(s.median_ms)}"
            + (
                f", {ms(worst['phase_over_its_median_ms'])} of it in '{worst['phase_that_grew']}'"
                if worst["phase_that_grew"]
                else ""
            )
            + (f"; '{varying[0]}' varies most (std {ms(varying[1])})" if varying else "")
        )
        how = f"if every step slower than the median ran at the median, the mean step would be {ms(excess)} shorter"
        return self.finding(ctx, excess, Evidence(text, how, slow), _advice(ctx, varying, slow), url=URL)


def _advice(ctx: Context, varying: tuple[str, float] | None, slow: list[dict[str, Any]]) -> str:
    slow_steps = ", ".join(str(r["step"]) for r in slow[:3])
    name = varying[0] if varying else (slow[0].get("phase_that_grew") or "")
    iteration = (
        " Meanwhile, judge changes on the median step or a steady range (dlscope summary PATH --iter-start N "
        f"--iter-stop M), leaving out steps {slow_steps} if they are not part of the steady state."
    )
    if name and re.search(DATA_LOADING_RE, name.lower()):
        first = (
            f"'{name}' takes a different time every step: the input pipeline is not keeping a buffer ahead of the"
            f" {'GPU' if ctx.data.has('kernels') else 'step'}. Prepare batches in the background (DataLoader workers"
            " with prefetch_factor >= 2, persistent_workers=True) so their jitter is absorbed."
        )
    elif name:
        first = (
            f"'{name}' grows in the slow steps (steps {slow_steps}): look there for periodic work (logging, "
            "checkpointing, evaluation, Python garbage collection: gc.freeze() after start-up) or for "
            "data-dependent shapes that change the work per step."
        )
    else:
        first = (
            f"Steps {slow_steps} are slow without a phase to blame: wrap the loop's parts in dlscope phases "
            "(with prof.phase('name'):) to see which one varies."
        )
    return first + iteration


RULE = HighStepVariance()
