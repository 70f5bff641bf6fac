"""Which rank the others wait for, judged from the steps measured without the tracer.

In lock step (ranks joined by collectives) every rank's step lasts about as long; a slow rank
shows in how long the *others* wait. dlscope's hooks time the host's waits for the GPU in every
step (``sync``: ``.item()``, ``.cpu()``, ``torch.cuda.synchronize``; see
:mod:`dlscope.capture.torch_hooks`), and a rank whose GPU stream is stalled in a collective until
the last rank arrives waits there. Per step, a rank's lag is the median wait of the other ranks
minus its own: what the others would stop waiting if it kept pace.

The traced steps cannot judge this: the tracer's host overhead differs per rank (and per run), so
a balanced job's traced steps show a different "straggler" every run. Over the untraced steps a
straggler is a rank whose lag is positive in significantly more steps than chance (a one-sided
sign test, Bonferroni-corrected for the number of ranks) and stands out of the ranks' own
step-to-step jitter (the median lag over :data:`OUTLIER_MADS` robust standard deviations of the
waits: on a balanced 4-GPU FSDP2 job one rank waited a steady 4-6 ms less, within the jitter).
The saving is its median lag: what the other ranks really wait in a typical step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .context import ProfileData
from .host_classes import HostClass
from .phase_times import step_class_times

# A pattern, not chance: the sign test's one-sided p-value under this (after the Bonferroni
# correction for the ranks compared) -- the usual 1% level.
ALPHA = 0.01
MIN_STEPS = 5
# A lag counts when it stands out of the waits' jitter by this many robust standard deviations
# (1.4826 x the median absolute deviation): the "moderately conservative" outlier line of Leys et
# al., "Detecting outliers: Do not use standard deviation around the mean, use absolute deviation
# around the median", J. Exp. Soc. Psychol. 49 (2013).
OUTLIER_MADS = 2.5
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class StragglerVerdict:
    """The rank with the largest mean lag over the untraced steps, and whether it is a straggler."""

    rank: int
    ranks: int
    steps: int                # steps every rank measured untraced
    lag_ms: float             # median over the steps of (the other ranks' median wait - its wait)
    others_wait_ms: float     # the other ranks' median wait per step, averaged
    step_ms: float            # mean step, over every rank
    lagging_steps: int        # steps in which its lag was positive
    p_value: float            # one-sided sign test, Bonferroni-corrected
    jitter_ms: float          # the waits' robust standard deviation over steps (median over ranks)
    excess_ms: dict[HostClass, float]  # its host time per class minus the others' median, per step

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA and self.lag_ms > max(OUTLIER_MADS * self.jitter_ms, 0.0)

    @property
    def culprit(self) -> HostClass | None:
        best = max(self.excess_ms.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] > 0 else None


def sign_test_p(positive: int, nonzero: int) -> float:
    """P(X >= positive) for X ~ Binomial(nonzero, 1/2): the one-sided sign test."""
    if nonzero <= 0:
        return 1.0
    return sum(math.comb(nonzero, k) for k in range(positive, nonzero + 1)) / 2.0 ** nonzero


def untraced_straggler(data: ProfileData) -> StragglerVerdict | None:
    """The verdict over the untraced steps; None with fewer than two ranks, fewer than
    :data:`MIN_STEPS` untraced steps shared by every rank, or no wait timed on any rank (a
    program that never waits for the GPU on the host: its waits are invisible without tracing)."""
    if not data.traced_excluded:
        return None
    t = step_class_times(data, "stat_steps", waits_apart=True)
    ranks = np.unique(t["rank"])
    if len(ranks) < 2 or not t["sync_ns"].any():
        return None
    steps = np.unique(t["step"])
    grid = {name: np.full((len(ranks), len(steps)), np.nan) for name in
            ("step_ns", "sync_ns", *(f"{c.label}_ns" for c in HostClass))}
    ri = np.searchsorted(ranks, t["rank"])
    si = np.searchsorted(steps, t["step"])
    for name, g in grid.items():
        g[ri, si] = t[name]
    whole = ~np.isnan(grid["step_ns"]).any(axis=0)  # steps every rank measured
    if whole.sum() < MIN_STEPS:
        return None
    grid = {k: v[:, whole] for k, v in grid.items()}
    wait = grid["sync_ns"]
    n_ranks, n_steps = wait.shape
    lag = np.empty_like(wait)
    others_wait = np.empty_like(wait)
    for r in range(n_ranks):
        others = np.delete(wait, r, axis=0)
        others_wait[r] = np.median(others, axis=0)
        lag[r] = others_wait[r] - wait[r]
    r = int(np.argmax(np.median(lag, axis=1)))
    positive, nonzero = int((lag[r] > 0).sum()), int((lag[r] != 0).sum())
    p = min(1.0, sign_test_p(positive, nonzero) * n_ranks)
    excess = {}
    for c in HostClass:
        own = grid[f"{c.label}_ns"]
        excess[c] = float(np.median(own[r] - np.median(np.delete(own, r, axis=0), axis=0))) / 1e6
    mad = np.median(np.abs(wait - np.median(wait, axis=1, keepdims=True)), axis=1)
    jitter = MAD_TO_SD * float(np.median(mad))
    return StragglerVerdict(rank=int(ranks[r]), ranks=n_ranks, steps=n_steps, lag_ms=float(np.median(lag[r])) / 1e6,
                            others_wait_ms=float(np.median(others_wait[r])) / 1e6,
                            step_ms=float(grid["step_ns"].mean()) / 1e6, lagging_steps=positive, p_value=p,
                            jitter_ms=jitter / 1e6, excess_ms=excess)
