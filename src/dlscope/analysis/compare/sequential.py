"""Stop when decided: a group-sequential test over the paired rounds of ``dlscope try``, numpy only.

After each round from the :attr:`Plan.min_rounds`-th on (a *look*), the rounds so far are tested as
:func:`~.significance.paired_rounds` tests them (Student's t over each round's log ratio of medians,
the fixed run against that round's baseline run), but at a *nominal* level smaller than ``alpha``:
looking after every round and stopping at the first interval that excludes zero would otherwise
call a fix that does nothing a saving far more often than ``alpha`` (Armitage, McPherson and Rowe,
"Repeated significance tests on accumulating data", JRSS A 1969: about 19% over 10 looks at 5%).

The boundaries follow an alpha-spending function (Lan and DeMets, "Discrete sequential boundaries
for clinical trials", Biometrika 1983): by the look at information fraction ``t = rounds /
max_rounds`` at most ``alpha(t)`` of the type I error is spent. The function is Lan-DeMets'
O'Brien-Fleming-like one, ``alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``: it spends almost
nothing at the first looks, where two or three rounds (t with one or two degrees of freedom) could
only decide an effect far larger than the noise anyway, and leaves the last look's boundary near the
fixed test's (2.74 against 2.36 at 8 rounds). Each look's boundary on |t| is placed so that the
paths of rounds it stops first, among simulated paths of independent normal rounds with no change,
are the spent share (Jennison and Turnbull, "Group Sequential Methods with Applications to Clinical
Trials", 2000, chapter 11 on group-sequential t tests, chapter 7 on spending functions). Under no
change t does not depend on the rounds' spread, so one simulation serves every program. The usual
shortcut, the normal boundaries carried over to t at their nominal levels (Jennison and Turnbull,
section 11.5), let 5.7% of no-change fixes through at 8 rounds in simulation: with one to seven
degrees of freedom the t statistics of successive looks are less alike than z's.

At each look the interval of the saving is the mean log ratio +- the look's boundary times its
standard error (the t interval at confidence ``1 - nominal level``): a
*repeated confidence interval* (Jennison and Turnbull, "Repeated confidence intervals for group
sequential clinical trials", Controlled Clinical Trials 1984): t centred on the true change has the
law it has under no change, so the intervals of all looks hold it at once with probability at least
``1 - alpha`` (to the simulation's precision). So the same interval decides both ways:

* it excludes zero: the fix ``saves`` (or ``costs``) time;
* it lies wholly within ``-margin..+margin`` % (5%): ``no effect`` worth having (equivalence,
  at the same level: two one-sided tests at ``level / 2`` each, Schuirmann 1987, are as strict);
* otherwise ``continue``, and at the last look ``undecided``.

A fix that saves a little but surely (its interval within 0..5%) is called ``saves``: the interval
says how little. A plan with one look (``min_rounds == max_rounds``) spends the whole ``alpha`` at it:
the fixed-rounds test of ``--repeat``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .significance import ALPHA, t_quantile, t_sf

MARGIN_PCT = 5.0  # within this much of the baseline's step either way: no effect worth having
MIN_ROUNDS = 2  # one round has no spread between runs: no verdict before two


class Verdict(str, Enum):
    """What the rounds so far say of a fix."""

    SAVES = "saves"
    COSTS = "costs"
    NO_EFFECT = "no effect"
    CONTINUE = "continue"  # not yet decided: run another round
    UNDECIDED = "undecided"  # the last look came and the interval still straddles zero and the margin

    @property
    def decided(self) -> bool:
        return self in (Verdict.SAVES, Verdict.COSTS, Verdict.NO_EFFECT)


@dataclass(frozen=True)
class Plan:
    """Looks after rounds ``min_rounds``, ``min_rounds + every``, ... and ``max_rounds``; ``alpha``
    spent over them in all. ``every``: the rounds between two looks, where rounds come in batches
    (``dlscope try`` on k GPUs runs k rounds at once and looks after each batch): alpha spent at a
    round never looked at would be lost to the looks that are made."""

    max_rounds: int
    min_rounds: int = MIN_ROUNDS
    alpha: float = ALPHA
    margin_pct: float = MARGIN_PCT
    every: int = 1

    def __post_init__(self) -> None:
        if not 2 <= self.min_rounds <= self.max_rounds:
            raise ValueError(f"looks need 2 <= min_rounds <= max_rounds (got {self.min_rounds}, {self.max_rounds})")
        if self.every < 1:
            raise ValueError(f"looks need every >= 1 (got {self.every})")

    @property
    def looks(self) -> tuple[int, ...]:
        """The rounds after which the plan looks."""
        looks = tuple(range(self.min_rounds, self.max_rounds + 1, self.every))
        return looks if looks[-1] == self.max_rounds else (*looks, self.max_rounds)

    def critical_t(self, rounds: int) -> float:
        """The |t| boundary of the look after ``rounds`` rounds: its interval is the mean log ratio
        +- this many standard errors."""
        return _bounds(self.looks, self.alpha)[self.looks.index(rounds)]

    def level(self, rounds: int) -> float:
        """The look's nominal two-sided level: the t test's p-value at its boundary (``rounds - 1``
        degrees of freedom). A p-value under it decides."""
        return min(1.0, 2.0 * t_sf(self.critical_t(rounds), rounds - 1))


@dataclass(frozen=True)
class Look:
    """One look: the geometric-mean saving over the rounds (% of the baseline's step, positive:
    faster), its repeated confidence interval, the t test's p-value and the level it is held to."""

    rounds: int
    saving_pct: float
    low_pct: float
    high_pct: float
    p_value: float
    level: float
    verdict: Verdict


def spent(t: float, alpha: float) -> float:
    """Lan-DeMets' O'Brien-Fleming-like spending function: the type I error spent by information
    fraction ``t`` (Lan and DeMets 1983, their alpha_1*)."""
    if t <= 0.0:
        return 0.0
    return min(alpha, math.erfc(_z(1.0 - alpha / 2.0) / math.sqrt(t) / math.sqrt(2.0)))


def _z(q: float) -> float:
    """The standard normal's ``q`` quantile (bisection on erfc: exact to double precision)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# Paths simulated to place the boundaries. The simulated rate has a standard error of
# sqrt(alpha (1 - alpha) / PATHS) (0.05%); each look spends alpha less three of them, so that the
# boundaries' own simulation error cannot carry the rate over alpha.
PATHS = 200_000
SEED = 20260102


@functools.lru_cache(maxsize=16)
def _bounds(looks: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """|t| boundaries of the looks: the largest that spend, in all, ``spent(n_k / n_K)`` of paths
    of independent N(0, 1) rounds. Under no change t is pivotal (its law does not depend on the
    rounds' spread), so standard normal rounds give the boundaries for every spread; with the
    looks' few degrees of freedom the z boundaries of the recursive integration (Armitage,
    McPherson and Rowe 1969) carried over at their nominal levels (Jennison and Turnbull, section
    11.5) let 5.7% through at 8 rounds, as simulated; the t statistics' own joint law does not."""
    if len(looks) == 1:  # one look: the fixed-rounds t test at alpha, nothing to simulate
        return (t_quantile(1.0 - alpha / 2.0, looks[0] - 1),)
    budget = alpha - 3.0 * math.sqrt(alpha * (1.0 - alpha) / PATHS)
    rounds = np.random.default_rng(SEED).standard_normal((PATHS, looks[-1]))
    sums, squares = np.cumsum(rounds, axis=1), np.cumsum(rounds**2, axis=1)
    alive = np.ones(PATHS, dtype=bool)
    out: list[float] = []
    used = 0
    for n in looks:
        mean = sums[:, n - 1] / n
        t = np.abs(mean) / np.sqrt((squares[:, n - 1] - n * mean**2) / (n - 1) / n)
        allowed = int((spent(n / looks[-1], budget) if n != looks[-1] else budget) * PATHS) - used
        if n == looks[0]:  # no look before it: the t law's own quantile
            c = t_quantile(1.0 - spent(n / looks[-1], budget) / 2.0, n - 1)
        else:  # the boundary between the last path let out and the first kept (none: above all)
            ranked = np.sort(t[alive])[::-1]
            c = float(ranked[0]) * 1.000001 if allowed <= 0 else float(ranked[allowed - 1] + ranked[allowed]) / 2.0
        stopped = alive & (t >= c)
        used += int(stopped.sum())
        alive &= ~stopped
        out.append(c)
    return tuple(out)


def intervals(plan: Plan, logs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(saving, low, high) in % for each row of ``logs`` (fixes x rounds, log(fixed / baseline)
    median per round): the geometric-mean saving and the look's repeated confidence interval."""
    n = logs.shape[1]
    mean = logs.mean(axis=1)
    half = plan.critical_t(n) * logs.std(axis=1, ddof=1) / math.sqrt(n)
    with np.errstate(over="ignore"):  # two rounds far apart: a boundary of thousands of errors, -inf %
        return (100.0 * (1.0 - np.exp(mean)), 100.0 * (1.0 - np.exp(mean + half)), 100.0 * (1.0 - np.exp(mean - half)))


# The verdicts as integer codes inside the array code (numpy would turn the str enum into strings)
ORDER = (Verdict.SAVES, Verdict.COSTS, Verdict.NO_EFFECT, Verdict.CONTINUE, Verdict.UNDECIDED)
_CODE = {v: i for i, v in enumerate(ORDER)}


def verdicts(plan: Plan, low: np.ndarray, high: np.ndarray, rounds: int) -> np.ndarray:
    """The verdict of each interval at the look after ``rounds`` rounds, as indices into
    :data:`ORDER`: excluding zero first (a small sure saving is a saving), then the margin."""
    last = _CODE[Verdict.UNDECIDED if rounds >= plan.max_rounds else Verdict.CONTINUE]
    inside = (low >= -plan.margin_pct) & (high <= plan.margin_pct)
    out: np.ndarray = np.where(
        low > 0.0,
        _CODE[Verdict.SAVES],
        np.where(high < 0.0, _CODE[Verdict.COSTS], np.where(inside, _CODE[Verdict.NO_EFFECT], last)),
    )
    return out


def sequence(plan: Plan, logs: np.ndarray) -> tuple[list[Verdict], np.ndarray]:
    """Each row of ``logs`` (fixes x max_rounds) looked at round by round, as ``dlscope try`` runs
    them: the verdict of each, and the rounds it took, stopped at its first decided look."""
    code = np.full(len(logs), _CODE[Verdict.CONTINUE])
    took = np.zeros(len(logs), dtype=int)
    for n in plan.looks:
        if n > logs.shape[1]:
            break
        _, low, high = intervals(plan, logs[:, :n])
        fresh = code == _CODE[Verdict.CONTINUE]
        code[fresh], took[fresh] = verdicts(plan, low, high, n)[fresh], n
    return [ORDER[c] for c in code], took


def look(plan: Plan, base_medians: list[float], fixed_medians: list[float]) -> Look:
    """The look after ``len(base_medians)`` rounds (one pair of medians per round, every value > 0;
    the count must be one of the plan's looks)."""
    logs = np.log(np.asarray(fixed_medians, dtype=float) / np.asarray(base_medians, dtype=float))
    n = len(logs)
    saving, low, high = (float(v[0]) for v in intervals(plan, logs[None, :]))
    se = float(logs.std(ddof=1)) / math.sqrt(n)
    mean = float(logs.mean())
    if se == 0.0:  # rounds that agree exactly: the interval is a point
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = min(1.0, 2.0 * t_sf(abs(mean) / se, n - 1))
    verdict = ORDER[int(verdicts(plan, np.array([low]), np.array([high]), n)[0])]
    return Look(n, saving, low, high, p, plan.level(n), verdict)
