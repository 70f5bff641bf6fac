"""The terminal table of ``dlscope try``: per fix, the measured saving next to the predicted one."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from ..analysis.compare.sequential import Plan
from ..analysis.compare.tries import FixOutcome


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _verdict(o: FixOutcome) -> str:
    if not o.applied:
        return f"not applied: {o.reason}"
    if o.measured_saving_pct is None:
        return o.why or "not measured"
    if o.verdict is not None:  # the rounds' verdict is the verdict
        parts = [f"{o.verdict.value.upper()} after {o.rounds} round{'s' if o.rounds != 1 else ''}"]
    else:
        parts = ["significant" if o.significant else "not significant"]
        if not o.significant and o.p_value is not None and o.p_value < o.alpha:
            parts[0] += " (the steps' bootstrap interval includes zero)"  # the one way p < 0.05 is not enough
    if o.agrees is not None and not (o.weaker and not o.agrees):
        parts.append("prediction holds" if o.agrees else "prediction off")
    elif o.weaker and o.predicted_saving_pct:
        parts.append(f"the fix applied was weaker than advised: {o.weaker}")
    elif o.predicted_saving_pct:
        parts.append("prediction undecided: more rounds (--max-rounds) would tell")
    if o.changes_precision:
        parts.append("changes precision")
    if o.loss_diverged:
        parts.append(f"LOSS DIVERGED: {o.loss_note}")
    return "; ".join(parts)


def render_tries(
    outcomes: list[FixOutcome],
    together: FixOutcome | None,
    out: Any,
    interrupted: bool = False,
    baseline_spread_pct: float | None = None,
    plan: Plan | None = None,
) -> None:
    """Print the table (``out``: a rich Console), and how far apart the unchanged runs were;
    ``plan``: the sequential rounds' plan, when the rounds stopped as they decided."""
    t = Table(title="Measured with each fix applied (median step, untraced, runs alternated)", title_justify="left")
    for c in (
        "fix",
        "baseline ms",
        "fixed ms",
        "measured saving",
        "interval" if plan else "95% interval",
        "p",
        "predicted",
        "verdict",
    ):
        t.add_column(c, justify="left" if c in ("fix", "verdict") else "right")
    for o in [*outcomes, *([together] if together else [])]:
        name = o.name if o.name != "combined" else f"together ({o.reason})"
        if o.applied_as:
            name += f": {o.applied_as}"
        lo_hi = (
            f"{o.measured_interval_pct[0]:+.1f}..{o.measured_interval_pct[1]:+.1f}%" if o.measured_interval_pct else "-"
        )
        t.add_row(
            escape(name),
            "-" if o.baseline_ms is None else f"{o.baseline_ms:,.2f}",
            "-" if o.fixed_ms is None else f"{o.fixed_ms:,.2f}",
            _pct(o.measured_saving_pct),
            lo_hi,
            "-" if o.p_value is None else f"{o.p_value:.2g}",
            _pct(o.predicted_saving_pct),
            escape(_verdict(o)),
        )
    out.print(t)
    shown = [o for o in [*outcomes, *([together] if together else [])] if o.p_test]
    if plan is not None:
        out.print(
            f"Rounds stop as they decide (at most {plan.max_rounds}): SAVES or COSTS when the interval "
            f"excludes zero, NO EFFECT when it lies within -{plan.margin_pct:g}..+{plan.margin_pct:g}%, "
            f"UNDECIDED after {plan.max_rounds} rounds. The interval and the level p is held to are "
            f"corrected for looking after every round (alpha spending; {plan.alpha:g} in all)."
        )
    if shown:  # the p beside each verdict is the verdict's: say which test gave it
        tests = "; or ".join(sorted({o.p_test for o in shown}))
        if plan is not None:
            out.print(
                f"p: {tests}: SAVES or COSTS when it is under the look's level, as the interval then excludes zero"
            )
        else:
            out.print(f"p: {tests} (significant: p < {shown[0].alpha:g} and the interval excludes zero)")
    if baseline_spread_pct is not None:
        more = "--max-rounds" if plan is not None else "--repeat"
        out.print(
            f"The unchanged program's own runs differ by {baseline_spread_pct:.0f}% (median step, slowest "
            f"against fastest): a fix that saves less than that needs more rounds ({more}) to be told "
            "apart from it."
        )
    if interrupted:
        out.print("Interrupted: the runs so far are measured above; the rest did not run.")
