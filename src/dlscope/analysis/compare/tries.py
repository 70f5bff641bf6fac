"""What a fix really saves: the runs of ``dlscope try`` (the program unchanged, and with each fix
applied, alternated) turned into one measured saving per fix, with its interval and test, set
against the saving the advice predicted.

The measured saving is that of the median step, over every measured step of every run of each
side (the untraced steps after the warm-up; ``dlscope diff``'s Mann-Whitney U test over the
steps). The runs, not the steps, are the independent units: one process's steps share its
placement, clocks and allocator, and on a launch-bound 5-7 ms step the same unchanged program ran
at a 7.6, 4.5 and 7.4 ms median in three runs of one try (H100, lease 9). So with two rounds or
more the interval is Student's t over each round's ratio of medians (the fixed run against that
round's baseline run: alternation cancels drift; :func:`~.significance.paired_rounds`), and a
saving is *significant* only when both the steps' test and the rounds' test reject; its p-value is
then the larger of the two (the test that both reject: an intersection-union test), so that a small
p never stands beside "not significant" (issue 41: the steps' p = 0.0054 was shown where the
rounds' test did not reject). Both are kept apart too (``steps_p_value``, ``rounds_p_value``). Pooled steps
had called a CNN's bf16 fix 10% slower with p = 0.0001 where its three rounds said -28%, -7% and
-2% (p = 0.26 over the rounds; H100, lease 10). With one round the runs' spread is unknown: the
interval is the steps' bootstrap, and the verdict says so.

A prediction *agrees* with a significant measurement when it is within 0.5x..2x of it or inside
its interval, or neither reaches 2% of the step. Against a saving that is not significant it
agrees when it predicts under 2%, is *off* when the interval's top is under half the prediction
(the measurement rules it out), and is undecided (None: more rounds would tell) otherwise. A fix
that applied less than the advice's change (``weaker``: fewer DataLoader workers than the
prediction needs) never makes a prediction *off*: it is left undecided, and the verdict says so.

Sequential rounds (:mod:`.sequential`): given a :class:`~.sequential.Plan`, the verdict is the
plan's look at the rounds the fix ran (``dlscope try`` stops a fix at its first decided look):
``saves``, ``costs``, ``no effect`` or ``undecided``. Then the interval is that look's repeated
confidence interval, the p-value the rounds' paired t held to the look's nominal level (``alpha``),
and *significant* means ``saves`` or ``costs``: the steps' test is kept apart (``steps_p_value``) and
decides nothing, since looking after every round is what the plan's levels correct for, not the
steps'. Without a plan (one round) the outcome is measured as above and has no verdict.

Numerics: the loss of each measured step (the scalar ``backward`` started from) of the fixed runs
against the baseline runs': a NaN or infinite loss, or a mean loss more than :data:`LOSS_TOLERANCE`
away from the baseline's, flags the fix.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...vocabulary.names import FixName, RuleId
from .sequential import Look, Plan, Verdict, look
from .significance import ALPHA, compare_samples, paired_rounds

if TYPE_CHECKING:
    import pyarrow as pa

# A fix's mean loss over the measured steps may differ from the baseline's by this share of it
# (plus LOSS_FLOOR): bf16 autocast and TF32 train to the fp32 loss within a few per cent
# (Micikevicius et al., "Mixed Precision Training", ICLR 2018; Kalamkar et al., "A Study of BFLOAT16
# for Deep Learning Training", 2019); further than that, the fix changed what is computed.
LOSS_TOLERANCE = 0.05
LOSS_FLOOR = 1e-3
# Under this share of the step a saving cannot be told from step-to-step variation (advice's floor).
SMALL_PCT = 2.0


@dataclass
class Run:
    """One run of the program: which fix (``baseline``, a fix's name, or ``combined``), in which
    round, its measured step times (ms) and losses, and what its fixes did."""

    label: str
    round: int
    exit_code: int
    steps_ms: list[float]
    losses: list[float] = field(default_factory=list)
    fixes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> applied, reason, ...
    profile: str = ""
    # where its time went (wall clock, ns): the capture's start and end, and its first step's end and
    # last step's end (warm-up included; step 0 starts with the capture, so its end marks the program's
    # set-up and first iteration done); None where the profile holds no steps
    capture_ns: tuple[int, int] | None = None
    steps_ns: tuple[int, int] | None = None

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.steps_ms) if self.steps_ms else None


@dataclass
class FixOutcome:
    """One fix, measured. Savings are % of the baseline's median step (positive: faster)."""

    name: FixName | Literal["combined"]  # a fix, or the fixes that helped, together
    rules: list[RuleId]
    applied: bool
    reason: str
    changes_precision: bool
    predicted_saving_pct: float | None
    measured_saving_pct: float | None = None
    measured_interval_pct: tuple[float, float] | None = None
    p_value: float | None = None  # of the verdict: see p_test
    p_test: str = ""  # which test gave p_value
    alpha: float = ALPHA  # significant: p_value under this, and the interval excludes zero
    steps_p_value: float | None = None  # Mann-Whitney U over the pooled steps
    rounds_p_value: float | None = None  # paired t over the rounds (two rounds or more)
    significant: bool = False
    agrees: bool | None = None
    loss_diverged: bool = False
    loss_note: str = ""
    baseline_ms: float | None = None
    fixed_ms: float | None = None
    runs: int = 0
    steps: int = 0
    why: str = ""
    applied_as: str = ""  # what the fix applied, in a few words ("4 workers")
    detail: dict[str, Any] = field(default_factory=dict)  # the same as the fix recorded it (num_workers ...)
    weaker: str = ""  # why the change applied is weaker than the advised one ('' when it is not)
    verdict: Verdict | None = None  # the sequential rounds' verdict (None: no plan, or not measured)
    rounds: int = 0  # rounds the verdict rests on: those the fix ran with a baseline run beside it

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["measured_interval_pct"] = list(self.measured_interval_pct) if self.measured_interval_pct else None
        d["verdict"] = self.verdict.value if self.verdict else None
        return d


def measure(
    name: FixName | Literal["combined"],
    rules: list[RuleId],
    base: list[Run],
    fixed: list[Run],
    predicted_pct: float | None,
    changes_precision: bool = False,
    plan: Plan | None = None,
) -> FixOutcome:
    """The outcome of fix ``name`` from its runs and the baseline runs; with ``plan``, its
    sequential verdict at the rounds it ran (see the module's doc)."""
    out = FixOutcome(
        name,
        rules,
        applied=True,
        reason="",
        changes_precision=changes_precision,
        predicted_saving_pct=predicted_pct,
        runs=len(fixed),
    )
    failed = [r for r in fixed if r.exit_code != 0]
    not_applied = [
        r.fixes.get(name, {}).get("reason") or "not recorded"
        for r in fixed
        if name in r.fixes and not r.fixes[name].get("applied")
    ]
    if failed:  # the exit code says more than what the fix saw of a run that broke off
        out.applied, out.reason = False, f"a run with it exited with {failed[0].exit_code}"
        return out
    if not_applied:
        out.applied, out.reason = False, not_applied[0]
        return out
    info = next((r.fixes[name] for r in fixed if isinstance(r.fixes.get(name), dict)), {})
    out.applied_as, out.detail, out.weaker = (
        info.get("applied_as") or "",
        info.get("detail") or {},
        info.get("weaker") or "",
    )
    per_sample = samples_factor(name, fixed)
    a = [s for r in base for s in r.steps_ms]
    b = [s / per_sample for r in fixed for s in r.steps_ms]
    out.steps = len(b)
    shift = compare_samples(a, b, "p50")
    if shift.a is None or shift.b is None or not shift.a:
        out.why = shift.why
        return out
    out.baseline_ms, out.fixed_ms = shift.a, shift.b
    out.measured_saving_pct = -100.0 * (shift.b - shift.a) / shift.a
    pairs = round_pairs(base, fixed, per_sample)
    out.p_value = out.steps_p_value = shift.p_value
    out.p_test = "Mann-Whitney U over the steps"
    out.rounds = len(pairs)
    seen = look_at(plan, pairs) if plan is not None else None
    if seen is not None:
        out.verdict, out.measured_interval_pct = seen.verdict, (seen.low_pct, seen.high_pct)
        out.significant = seen.verdict in (Verdict.SAVES, Verdict.COSTS)
        out.p_value = out.rounds_p_value = seen.p_value
        out.alpha = seen.level
        out.p_test = (
            "the rounds' paired t, held to its look's level (sequential rounds)"
            if plan is not None and len(plan.looks) > 1
            else "the rounds' paired t"
        )
        out.why = (
            f"{shift.why}; {seen.rounds} rounds, each round's fixed run against its baseline run: paired t "
            f"p={seen.p_value:.2g} against the look's level {seen.level:.2g}: {seen.verdict.value}"
        )
    elif len(pairs) >= 2:
        rounds = paired_rounds([x for x, _ in pairs], [y for _, y in pairs])
        out.measured_interval_pct = (100.0 * (1.0 - rounds.ratio_high), 100.0 * (1.0 - rounds.ratio_low))
        out.significant = shift.significant and rounds.p_value < ALPHA
        out.rounds_p_value = rounds.p_value
        if shift.p_value is not None:
            out.p_value = max(shift.p_value, rounds.p_value)
            out.p_test = "the larger of the steps' Mann-Whitney U and the rounds' paired t"
        out.why = (
            f"{shift.why}; {rounds.rounds} rounds, each round's fixed run against its baseline run: "
            f"p={rounds.p_value:.2g} (paired t)"
        )
        if shift.significant and not out.significant:
            out.why += ": the rounds do not bear it out, not significant"
    else:
        if shift.ci_low is not None and shift.ci_high is not None:
            out.measured_interval_pct = (-100.0 * shift.ci_high / shift.a, -100.0 * shift.ci_low / shift.a)
        out.significant = shift.significant and plan is None  # a plan decides from two rounds on
        out.verdict = Verdict.UNDECIDED if plan is not None else None
        out.why = f"{shift.why}; one round: the spread between runs is unknown"
    out.agrees = agrees(predicted_pct, out.measured_saving_pct, out.significant, out.measured_interval_pct)
    if out.weaker and out.agrees is False:
        out.agrees = None  # the prediction was for the advised change, not for this weaker one
    out.loss_diverged, out.loss_note = loss_check(base, fixed)
    if per_sample != 1.0:
        scaled = loss_scale(base, fixed, per_sample)
        if scaled:
            out.loss_diverged, out.loss_note = False, scaled
    return out


# How close the ratio of the losses must come to the batch factor to say the loss is a sum over samples.
LOSS_SCALE_TOLERANCE = 0.2


def loss_scale(base: list[Run], fixed: list[Run], factor: float) -> str:
    """With a batch ``factor`` times larger: a note when the fixed runs' loss grew by about that factor
    (the loss sums its samples, so the gradient grew too: the learning rate acts ``factor`` times larger),
    else ''."""
    lb = sorted(v for r in base for v in r.losses)
    lf = sorted(v for r in fixed for v in r.losses)
    if not lb or not lf or lb[len(lb) // 2] <= 0:
        return ""
    ratio = lf[len(lf) // 2] / lb[len(lb) // 2]
    if abs(ratio - factor) / factor > LOSS_SCALE_TOLERANCE:
        return ""
    return (
        f"the loss grew {ratio:.2f}x with the {factor:g}x batch: it sums its samples, so the gradient grew "
        f"as well; divide the loss by the batch (a mean) or the learning rate by {factor:g} when you make the change"
    )


def look_at(plan: Plan, pairs: list[tuple[float, float]]) -> Look | None:
    """The plan's look at these rounds' (baseline, fixed) medians; None under two rounds. Rounds
    the plan does not look at (a fixed plan cut short by Ctrl-C) are tested alone, at ``alpha``."""
    if len(pairs) < 2:
        return None
    if len(pairs) not in plan.looks:
        plan = Plan(len(pairs), len(pairs), plan.alpha, plan.margin_pct)
    return look(plan, [x for x, _ in pairs], [y for _, y in pairs])


def samples_factor(name: str, fixed: list[Run]) -> float:
    """How many times the samples of a step the fixes of ``name``'s runs made them process (each
    fix's detail's ``samples_factor``: a larger batch; 1 for the others), multiplied: the runs are
    compared per sample. ``name`` is one fix, or ``combined`` whose runs apply several."""
    first = next((r for r in fixed if r.fixes), None)
    if first is None:
        return 1.0
    applied = [first.fixes[name]] if name in first.fixes else list(first.fixes.values())
    factors = [(i.get("detail") or {}).get("samples_factor") or 1.0 for i in applied if isinstance(i, dict)]
    return math.prod(float(f) for f in factors)


def round_pairs(base: list[Run], fixed: list[Run], per_sample: float = 1.0) -> list[tuple[float, float]]:
    """(baseline median, fixed median) of each round that has both runs measured (the fixed one per
    ``per_sample`` steps' worth of samples when the fix grows the batch)."""
    by_round = {r.round: r.median_ms for r in base if r.median_ms}
    return [(by_round[f.round], f.median_ms / per_sample) for f in fixed if f.median_ms and f.round in by_round]


def run_spread_pct(runs: list[Run]) -> float | None:
    """How far apart the runs of one side are: (slowest median step / fastest) - 1, in %; None
    with fewer than two measured runs. When the unchanged program's own runs differ by more than
    a fix saves, only more rounds can tell the fix apart."""
    medians = [r.median_ms for r in runs if r.median_ms]
    return 100.0 * (max(medians) / min(medians) - 1.0) if len(medians) >= 2 else None


def agrees(
    predicted_pct: float | None,
    measured_pct: float | None,
    significant: bool,
    interval: tuple[float, float] | None = None,
) -> bool | None:
    """Whether the prediction holds (see the module's doc): True, False, or None when a saving
    that is not significant leaves it undecided."""
    if measured_pct is None:
        return None
    pred = predicted_pct or 0.0
    if not significant:
        if pred < SMALL_PCT:  # nothing to gain, nothing advised (a slowdown included)
            return True
        return False if interval is not None and interval[1] < pred / 2 else None
    if measured_pct < SMALL_PCT and pred < SMALL_PCT:
        return True
    if interval is not None and interval[0] <= pred <= interval[1]:
        return True
    if measured_pct <= 0 or pred <= 0:
        return False
    return 0.5 <= pred / measured_pct <= 2.0


def loss_check(base: list[Run], fixed: list[Run]) -> tuple[bool, str]:
    """(diverged, note): the fixed runs' losses against the baseline's."""
    lb = [v for r in base for v in r.losses]
    lf = [v for r in fixed for v in r.losses]
    if not lf:
        return False, "no loss recorded (no scalar reached backward)"
    if any(not math.isfinite(v) for v in lf):
        return True, "the loss became NaN or infinite"
    if not lb:
        return False, "no baseline loss to compare"
    mb, mf = statistics.fmean(lb), statistics.fmean(lf)
    tol = LOSS_TOLERANCE * abs(mb) + LOSS_FLOOR
    if abs(mf - mb) > tol:
        return True, f"mean loss {mf:.4g} against the baseline's {mb:.4g} (more than {LOSS_TOLERANCE:.0%} apart)"
    return False, f"mean loss {mf:.4g} against the baseline's {mb:.4g}"


# ---- the tries table (store.schema.TRIES): one declaration, its writer and reader from it ---------
def _interval_end(o: FixOutcome, i: int) -> float | None:
    return o.measured_interval_pct[i] if o.measured_interval_pct else None


# TRIES columns that are not FixOutcome fields of the same name, and how each is made from one
TRIES_DERIVED: dict[str, Callable[[FixOutcome], Any]] = {
    "fix": lambda o: o.name,
    "rules": lambda o: ",".join(o.rules),
    "reason": lambda o: o.reason or None,
    "measured_low_pct": lambda o: _interval_end(o, 0),
    "measured_high_pct": lambda o: _interval_end(o, 1),
    "verdict": lambda o: o.verdict.value if o.verdict else None,
}


def tries_table(outcomes: list[FixOutcome]) -> pa.Table:
    """The outcomes as the ``tries`` table: a column for each of the schema's, in its order."""
    import pyarrow as pa

    from ...store.schema import TRIES

    def value(o: FixOutcome, column: str) -> Any:
        make = TRIES_DERIVED.get(column)
        return make(o) if make else getattr(o, column)

    return pa.table({c.name: pa.array([value(o, c.name) for o in outcomes], c.type) for c in TRIES.columns})


def read_tries(table: pa.Table) -> list[FixOutcome]:
    """The ``tries`` table back as outcomes (the fields it stores; the others keep their defaults)."""
    from ...store.schema import TRIES

    stored = {c.name for c in TRIES.columns} - set(TRIES_DERIVED)
    out = []
    for r in table.to_pylist():
        low, high = r.get("measured_low_pct"), r.get("measured_high_pct")
        verdict = Verdict(r["verdict"]) if r.get("verdict") else None
        rules = [RuleId(x) for x in (r.get("rules") or "").split(",") if x]
        o = FixOutcome(
            FixName(r["fix"]),
            rules,
            bool(r["applied"]),
            r.get("reason") or "",
            bool(r.get("changes_precision")),
            r.get("predicted_saving_pct"),
            measured_interval_pct=(low, high) if low is not None and high is not None else None,
            verdict=verdict,
            **{k: r[k] for k in stored if k in r and k not in ("applied", "changes_precision", "predicted_saving_pct")},
        )
        out.append(o)
    return out


def read_run(path: Path, label: str, rnd: int, status: int, first_measured: int) -> Run:
    """A finished run: its measured steps (untraced, after the warm-up; rank 0), losses and fixes."""
    from ..core.context import ProfileData

    data = ProfileData.open(path)
    steps = [
        r[0]
        for r in data.con.execute(
            "SELECT (end_ns - start_ns) / 1e6 FROM stat_steps WHERE rank = (SELECT min(rank) FROM stat_steps) "
            "ORDER BY step"
        ).fetchall()
    ]
    span = data.con.execute("SELECT min(end_ns), max(end_ns) FROM steps").fetchall()[0]  # one row, read whole
    meta = data.meta
    st = data.meta.collectors.get("fixes")
    settings = st.settings if st is not None else {}
    losses = [float(v) for s, v in settings.get("losses") or [] if s >= first_measured and isinstance(v, (int, float))]
    bad = [v for s, v in settings.get("losses") or [] if s >= first_measured and not isinstance(v, (int, float))]
    losses += [float(v) for v in bad]  # 'nan' / 'inf' as floats: the numerics check flags them
    return Run(
        label,
        rnd,
        status,
        steps,
        losses,
        settings.get("fixes") or {},
        str(path),
        (meta.start_ns, meta.end_ns) if meta.start_ns and meta.end_ns else None,
        (int(span[0]), int(span[1])) if span and span[0] is not None else None,
    )
