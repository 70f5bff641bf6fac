"""What each fix would do to the step: the findings' savings predicted by replaying the traced
steps with the fix applied (:mod:`dlscope.analysis.models.replay`), and the chain of fixes.

A rule's own saving is a bound on one mechanism (the GPU time a change cuts, the host time it
frees), and a bound is often far from what the fix gives: GPU time saved is worth nothing while
the host is the bottleneck, host time saved is worth nothing while the GPU is. The replay plays
the step's host calls and GPU work with their dependencies, so it says which of the two sets the
pace, before and after the change. Where a rule describes its change as a :class:`Fix`, the
finding's saving becomes the replay's prediction (``bound_ms_per_step`` keeps the rule's bound).

**Calibrated on the untraced steps.** Tracing slows the host, never the GPU: the replay scales
the host's work so that the replayed step matches the steps measured without tracing
(:func:`~dlscope.analysis.models.replay.calibrate`), so the profiler's own overhead never reads as a
problem of the program.

**The chain.** Findings rank by what their fix saves now. Each also says what it saves once the
findings above it are fixed: a cause masked by a larger one (the GPU's work, hidden while the host
loads data) is still named, with the saving it will have when its turn comes. A finding that
saves under the floor both now and along the chain is kept, as information, after all the others.
"""

from __future__ import annotations

from ..analysis.core.class_times import untraced_class_times
from ..analysis.core.host_classes import HostClass
from ..analysis.models.replay import (
    Calibration,
    CalibrationBasis,
    Calls,
    Fix,
    calibrate,
    calibrate_by_class,
    replay_calls,
    step_ms,
    traced_work_ms,
)
from ..vocabulary.names import RuleId
from . import alternatives
from .context import Context
from .finding import Finding, Severity, WhatIf, cap_severity, severity_for
from .rule import MIN_SAVING_PCT, Rule

# Replay only profiles whose traced steps the model covers: enough calls to be a real program.
MIN_CALLS = 10
# Severity discipline (docs/DESIGN's measurement basis): a prediction from traced timing alone
# (every step traced) is never CRITICAL or HIGH; one that no measurement confirms is at most LOW.
TRACED_ONLY_CAP = Severity.MEDIUM
UNCONFIRMED_CAP = Severity.LOW


class Replayer:
    """The calibrated replay of one profile, shared by every finding's what-if."""

    def __init__(self, ctx: Context, waves: bool = True) -> None:
        """``waves``: a fix to replay grows the batch (the calls' wave factors are computed only then)."""
        self.ctx = ctx
        self.calls: Calls = replay_calls(ctx.data, waves)
        self.calibration: Calibration = calibrated(self.calls, ctx)
        self.base_ms = self.step(self.calls)
        # each chain of fixes replayed once: the chain below asks for the step after the fixes above a
        # finding, which is the step the finding above it was replayed with (a replay is ~20 ms on 500k events)
        self._replayed: dict[tuple[int, ...], float] = {(): self.base_ms}

    @property
    def usable(self) -> bool:
        return (
            self.ctx.basis.has_steps
            and not self.calls.empty
            and len(self.calls["wid"]) >= MIN_CALLS
            and self.base_ms > 0
        )

    def step(self, calls: Calls, batch: float = 1.0) -> float:
        return step_ms(calls, self.calibration.factors, per_sample_of=batch)

    def with_fixes(self, fixes: list[Fix]) -> float:
        key = tuple(id(f) for f in fixes)  # the fixes live as long as this replayer's caller holds them
        if key not in self._replayed:
            calls, batch = self.calls, 1.0
            for f in fixes:
                calls = f.apply(calls)
                batch *= f.batch
            self._replayed[key] = self.step(calls, batch)
        return self._replayed[key]


# A class of host work whose traced time is under this share of the traced step need not have
# been measured untraced for the per-class calibration (a few stray microseconds of 'input').
MIN_CLASS_SHARE = 0.02


def calibrated(calls: Calls, ctx: Context) -> Calibration:
    """The replay's calibration to the untraced steps: per host class where the untraced steps'
    phases measure every class the traced steps hold, else one factor on all host work (the
    profile has untraced steps but not their phases: recorded before the hooks, or imported),
    else none (every step traced)."""
    basis = ctx.basis
    if not (basis.has_steps and basis.traced_excluded and basis.mean_step_ms):
        return calibrate(calls, None)
    times = untraced_class_times(ctx.data)
    if times is not None and not calls.empty:
        work = traced_work_ms(calls)
        total = float(work.sum()) or 1.0
        needed = {c for c in HostClass if work[c] / total >= MIN_CLASS_SHARE}
        if times.covers(needed):
            return calibrate_by_class(calls, times.ms, basis.mean_step_ms, times)
    return calibrate(calls, basis.mean_step_ms)


def apply(ctx: Context, findings: list[Finding], rules: dict[RuleId, Rule]) -> list[Finding]:
    """``findings`` with replayed savings and the chain where rules give a fix, ranked (causes
    by saving now, each group of alternatives together at its best member's place, then symptoms,
    and findings whose fix saves under the floor now and along the chain)."""
    alternatives.link(findings, rules)
    fixes: dict[RuleId, Fix] = {}  # the replay's change of each finding that has one, by its rule
    for f in findings:
        rule = rules.get(f.id)
        fix = rule.what_if(ctx, f) if rule is not None else None
        if fix is not None:
            fixes[f.id] = fix
    if not fixes:
        return alternatives.ranked(findings)
    r = Replayer(ctx, waves=any(fix.batch != 1.0 for fix in fixes.values()))
    if not r.usable:
        return alternatives.ranked(findings)
    if not r.calibration.matched:
        return _unconfirmed(findings, r)
    unit = ctx.basis.unit_ms or r.base_ms
    for f in findings:
        fix = fixes.get(f.id)
        if fix is None:
            continue
        fixed = r.with_fixes([fix])
        _set_saving(f, r.base_ms - fixed, unit, r.calibration.basis)
        f.what_if = WhatIf(
            step_ms=r.base_ms,
            fixed_step_ms=fixed,
            per_sample=fix.batch != 1.0,
            host_factor=r.calibration.host_factor,
            host_factors=r.calibration.by_class,
            calibration=r.calibration.basis,
        )
        f.evidence.saving = _saving_text(r, fixed, f, fix) + f" The rule's own bound: {f.evidence.saving}"
        if r.calibration.basis is CalibrationBasis.NONE:
            f.evidence.saving += (
                " Every step was traced, so no step measured without the tracer confirms the "
                f"host's timing: at most {TRACED_ONLY_CAP.upper()}."
            )
    ordered = alternatives.ranked(findings)
    # the chain: each fix after the ones above it (a larger batch goes last: it changes the unit); the
    # members of a group of alternatives each after the fixes above the group (never after each other:
    # the user picks one), and the findings below after every member's fix, as when they were steps of
    # one chain (bf16's change holds TF32's: below the group, what is left after the fuller fix)
    applied: list[Fix] = []
    above_group: dict[frozenset[RuleId], list[Fix]] = {}
    for f in ordered:
        group = frozenset((f.id, *f.alternatives))
        above = above_group.setdefault(group, list(applied))
        fix = fixes.get(f.id)
        if fix is None or f.what_if is None:
            continue
        before = r.with_fixes(above)
        after = r.with_fixes([*above, fix])
        w = f.what_if
        w.after_above_ms, w.after_above_fixed_ms = before, after
        w.saving_after_above_ms = max(before - after, 0.0)
        w.fixed_above = [g.id for g in ordered if g.id in {a.name for a in above}]
        if fix.batch == 1.0:
            applied.append(fix)
    for f in ordered:
        last = f.what_if
        if last is not None and f.saving_pct is not None and f.saving_pct < MIN_SAVING_PCT:
            after_pct = 100 * last.saving_after_above_ms / unit
            if after_pct < MIN_SAVING_PCT:
                f.negligible = True
                f.severity = Severity.INFO
                f.evidence.saving += (
                    f" Under {MIN_SAVING_PCT:g}% of the step now and after the fixes above it: the "
                    "cause is real, its fix would hardly show."
                )
                continue
            slower = -last.saving_ms
            if slower > 0:  # e.g. autocast's casts on a host-bound step: say it, not just "0 ms"
                f.evidence.saving += f" Applied today it would lengthen the step by {slower:.2f} ms."
            f.evidence.saving += (
                f" Masked now: once {', '.join(last.fixed_above)} "
                f"{'is' if len(last.fixed_above) == 1 else 'are'} fixed it saves "
                f"{last.saving_after_above_ms:.2f} ms per step ({after_pct:.0f}% of today's step)."
            )
            f.severity = severity_for(after_pct)
            if r.calibration.basis is CalibrationBasis.NONE:
                f.severity = cap_severity(f.severity, TRACED_ONLY_CAP)
    return alternatives.ranked(ordered)


def _set_saving(f: Finding, saving_ms: float, unit_ms: float, basis: CalibrationBasis) -> None:
    saving_ms = min(max(saving_ms, 0.0), unit_ms or saving_ms)
    f.saving_ms_per_step = saving_ms
    f.saving_pct = 100 * saving_ms / unit_ms if unit_ms else None
    f.severity = severity_for(f.saving_pct)
    if basis is CalibrationBasis.NONE:  # every step traced: traced timing alone is never CRITICAL or HIGH
        f.severity = cap_severity(f.severity, TRACED_ONLY_CAP)


def _unconfirmed(findings: list[Finding], r: Replayer) -> list[Finding]:
    """The replay could not be matched to the untraced steps, so the traced steps do not stand for
    the others: every finding judged from them keeps its rule's own bound, says why, and is at
    most LOW (no measured basis). Findings judged from untraced steps keep their severity."""
    cal = r.calibration
    for f in findings:
        if f.untraced:
            continue
        f.severity = cap_severity(f.severity, UNCONFIRMED_CAP)
        f.confirmed = False
        f.evidence.saving += (
            f" Not confirmed: the traced steps replay to {cal.calibrated_ms or 0:.1f} ms, the steps "
            f"measured without tracing took {cal.target_ms or 0:.1f} ms (the traced steps did other "
            "work, e.g. compiling), so no prediction rests on them."
        )
    return alternatives.ranked(findings)


def _saving_text(r: Replayer, fixed: float, f: Finding, fix: Fix) -> str:
    n = r.calls.windows
    cal = r.calibration.note
    per = "per sample, in ms per step of today's batch" if fix.batch != 1.0 else "per step"
    return (
        f"predicted by replaying the {n} traced step{'s' if n != 1 else ''} with the fix applied "
        f"({fix.describe or fix.name}){'; ' + cal if cal else ''}: {r.base_ms:.1f} -> {fixed:.1f} ms {per}."
    )
