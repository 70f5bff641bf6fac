"""Is a change in step time real? Tests on two samples of step durations, numpy only.

* :func:`mann_whitney`: the two-sided Mann-Whitney U test (does one sample tend to be larger?),
  exact for small samples without ties, else the normal approximation with tie and continuity
  corrections: the same choice and the same p-values as ``scipy.stats.mannwhitneyu`` (the tests
  check it against scipy).
* :func:`bootstrap_diff`: a percentile-bootstrap confidence interval of the difference of a
  quantile (median, P95, P99) between the two samples, resampling each sample independently.
* :func:`bootstrap_one`: the interval of one sample's quantile, for a baseline that is a single
  number (a saved summary) rather than a sample.
* :func:`paired_rounds`: the change where each side is several runs (processes) of a program,
  run in alternating rounds: each round's ratio of medians is one observation, and Student's t
  over their logarithms gives the interval and the test. Steps of one process share its
  placement, clocks and allocator, so the runs, not the steps, are the independent units (Kalibera
  and Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013); pairing the runs of a round
  cancels the drift between rounds. With the two to five rounds a user can afford, resampling the
  runs (a bootstrap over 3 values) understates their spread; t with n - 1 degrees of freedom does
  not (Student, 1908).

Why both: the U test has an exact null distribution and is robust to the outliers step times
have (a slow first step, a GC pause), so it decides significance; the bootstrap says how large
the change is, in milliseconds, with its uncertainty. A change is called significant when the
test rejects at ``alpha`` and the interval excludes zero (tail quantiles: the interval alone,
with at least :data:`MIN_TAIL` steps on each side).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

ALPHA = 0.05
CONFIDENCE = 0.95
N_BOOT = 4000
SEED = 20260101  # fixed: the same two profiles always give the same interval
EXACT_MAX_N = 8  # scipy's rule: exact when a sample has at most 8 values and there are no ties
MIN_STEPS = 3  # fewer steps per side: no interval and no verdict
MIN_TAIL = 10  # a P95/P99 of fewer steps is close to the maximum: no verdict on tails


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the sizes of the tie groups."""
    order = np.argsort(values, kind="mergesort")
    sorted_v = values[order]
    _, first, counts = np.unique(sorted_v, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0  # average of ranks first+1 .. first+count
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(avg, counts)
    return ranks, counts


def _u_counts(m: int, n: int) -> list[int]:
    """How many arrangements of m + n distinct values give each U = 0 .. m*n: the coefficients of
    the Gaussian binomial [m+n choose m]_q = prod_{k=1..m} (1 - q^(n+k)) / (1 - q^k), in exact
    integers (the counts outgrow int64 quickly)."""
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for k in range(1, m + 1):
        shift = n + k
        for i in range(size - 1, shift - 1, -1):  # times (1 - q^shift)
            poly[i] -= poly[i - shift]
        for i in range(k, size):  # divided by (1 - q^k): the quotient's running sum
            poly[i] += poly[i - k]
    return poly


def mann_whitney(a: np.ndarray | list[float], b: np.ndarray | list[float]) -> tuple[float, float, str]:
    """Two-sided Mann-Whitney U test of ``a`` against ``b``: (U of a, p-value, method)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        raise ValueError("both samples need at least one value")
    ranks, ties = _ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u = max(u1, n1 * n2 - u1)
    if (ties == 1).all() and min(n1, n2) <= EXACT_MAX_N:
        counts = _u_counts(min(n1, n2), max(n1, n2))
        tail = sum(counts[int(round(u)) :])
        return u1, min(1.0, 2.0 * tail / math.comb(n1 + n2, n1)), "exact"
    n = n1 + n2
    tie_term = float((ties.astype(float) ** 3 - ties).sum()) / (n * (n - 1)) if n > 1 else 0.0
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sigma == 0:
        return u1, 1.0, "asymptotic"
    z = (u - n1 * n2 / 2.0 - 0.5) / sigma
    return u1, min(1.0, math.erfc(z / math.sqrt(2.0))), "asymptotic"


# Past this many steps the bootstrap draws each replicate's statistic directly instead of
# resampling every step: resampling is n_boot x n draws (4000 x 100k steps of a 10-minute run
# took a minute and a half), the direct draws are n_boot and follow the same distribution.
RESAMPLE_MAX_N = 2000


def _order_statistic_quantiles(xs: np.ndarray, q: float, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Bootstrap replicates of ``np.quantile(resample, q)`` (linear interpolation) for the sorted
    sample ``xs``, without resampling. A resample is ``xs[floor(n * U_i)]`` for n uniform U_i, so
    its k-th smallest value is ``xs[floor(n * U_(k))]``; the k-th order statistic of n uniforms
    is Beta(k, n + 1 - k), and the next one lies above it at ``(1 - U_(k)) * Beta(1, n - k)``
    (the least of the n - k uniforms left). The quantile interpolates between the two."""
    n = len(xs)
    h = (n - 1) * q
    k = int(math.floor(h))  # 0-based: the (k+1)-th smallest
    frac = h - k
    u = rng.beta(k + 1, n - k, size=n_boot)
    lo = xs[np.minimum((u * n).astype(np.int64), n - 1)]
    if frac == 0.0 or k + 1 >= n:
        return lo
    u_next = u + (1.0 - u) * rng.beta(1, n - k - 1, size=n_boot)
    hi = xs[np.minimum((u_next * n).astype(np.int64), n - 1)]
    mixed: np.ndarray = lo + frac * (hi - lo)
    return mixed


def _resampled_means(x: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """Bootstrap replicates of the mean. For a long run: normal with the bootstrap's own variance
    (population variance / n), the shape the mean of thousands of steps has."""
    if len(x) > RESAMPLE_MAX_N:
        return rng.normal(float(x.mean()), float(x.std()) / math.sqrt(len(x)), size=n_boot)
    means: np.ndarray = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return means


def _resampled_quantiles(x: np.ndarray, q: float, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    if len(x) > RESAMPLE_MAX_N:
        return _order_statistic_quantiles(np.sort(x), q, rng, n_boot)
    # chunks keep memory bounded (n_boot x n indices at once would be large)
    out = np.empty(n_boot)
    chunk = max(1, 2_000_000 // max(len(x), 1))
    for s in range(0, n_boot, chunk):
        e = min(n_boot, s + chunk)
        idx = rng.integers(0, len(x), size=(e - s, len(x)))
        out[s:e] = np.quantile(x[idx], q, axis=1)
    return out


def bootstrap_diff(
    a: np.ndarray | list[float],
    b: np.ndarray | list[float],
    q: float = 0.5,
    confidence: float = CONFIDENCE,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of quantile(b, q) - quantile(a, q)."""
    rng = np.random.default_rng(seed)
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = _resampled_quantiles(y, q, rng, n_boot) - _resampled_quantiles(x, q, rng, n_boot)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(d, [tail, 1.0 - tail])
    return float(lo), float(hi)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function, evaluated by the
    modified Lentz method (converges fast for x < (a + 1) / (a + b + 2))."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    tail = 0.5 * incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (bisection on :func:`t_sf`; q in (0, 1))."""
    lo, hi = -1e6, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 1.0 - t_sf(mid, df) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass
class RoundsShift:
    """The change from A to B over alternating rounds, as ratios B/A of each round's medians:
    their geometric mean, its interval, and the two-sided p-value of no change."""

    rounds: int
    ratio: float
    ratio_low: float
    ratio_high: float
    p_value: float


def paired_rounds(a_medians: list[float], b_medians: list[float], confidence: float = CONFIDENCE) -> RoundsShift:
    """Student's t over log(b_i / a_i), one pair per round (at least two rounds, every value > 0).
    Rounds whose ratios are all equal give a zero-width interval and p = 0 (or 1 for no change)."""
    logs = np.log(np.asarray(b_medians, dtype=float) / np.asarray(a_medians, dtype=float))
    n = len(logs)
    mean = float(logs.mean())
    se = float(logs.std(ddof=1)) / math.sqrt(n)
    if se == 0.0:
        return RoundsShift(n, math.exp(mean), math.exp(mean), math.exp(mean), 1.0 if mean == 0.0 else 0.0)
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) * se
    p = min(1.0, 2.0 * t_sf(abs(mean) / se, n - 1))
    return RoundsShift(n, math.exp(mean), math.exp(mean - half), math.exp(mean + half), p)


def bootstrap_one(
    b: np.ndarray | list[float], q: float = 0.5, confidence: float = CONFIDENCE, n_boot: int = N_BOOT, seed: int = SEED
) -> tuple[float, float]:
    """Percentile-bootstrap interval of quantile(b, q)."""
    rng = np.random.default_rng(seed)
    v = _resampled_quantiles(np.asarray(b, dtype=float), q, rng, n_boot)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(v, [tail, 1.0 - tail])
    return float(lo), float(hi)


@dataclass
class Shift:
    """How one statistic of the step time changed from A to B (milliseconds)."""

    stat: str  # 'p50', 'p95', 'p99', 'mean'
    a: float | None
    b: float | None
    delta: float | None  # b - a
    delta_pct: float | None
    ci_low: float | None  # interval of the change (b - a)
    ci_high: float | None
    p_value: float | None  # Mann-Whitney, for p50 and mean
    significant: bool
    why: str  # one line: the verdict and what it rests on

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}


def _pct(delta: float | None, base: float | None) -> float | None:
    return None if delta is None or not base else 100.0 * delta / base


def compare_samples(a: np.ndarray | list[float], b: np.ndarray | list[float], stat: str, alpha: float = ALPHA) -> Shift:
    """Compare a statistic ('p50', 'p95', 'p99' or 'mean') of two samples."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not len(x) or not len(y):
        return Shift(stat, None, None, None, None, None, None, None, False, "no steps on one side")
    if stat == "mean":
        va, vb = float(x.mean()), float(y.mean())
    else:
        va, vb = float(np.quantile(x, QUANTILES[stat])), float(np.quantile(y, QUANTILES[stat]))
    delta = vb - va
    n = min(len(x), len(y))
    if n < MIN_STEPS:
        return Shift(
            stat,
            va,
            vb,
            delta,
            _pct(delta, va),
            None,
            None,
            None,
            False,
            f"too few steps to test ({len(x)} and {len(y)}; at least {MIN_STEPS} each)",
        )
    if stat == "mean":
        rng = np.random.default_rng(SEED)
        ma = _resampled_means(x, rng, N_BOOT)
        d = _resampled_means(y, rng, N_BOOT) - ma
        tail = (1.0 - CONFIDENCE) / 2.0
        lo, hi = (float(v) for v in np.quantile(d, [tail, 1.0 - tail]))
    else:
        lo, hi = bootstrap_diff(x, y, QUANTILES[stat])
    excludes_zero = lo > 0 or hi < 0
    if stat in ("p50", "mean"):
        _, p, method = mann_whitney(x, y)
        sig = p < alpha and excludes_zero
        why = (
            f"Mann-Whitney U ({method}) p={p:.2g}, {int(CONFIDENCE * 100)}% bootstrap interval of the change "
            f"{lo:+.3f}..{hi:+.3f} ms: {'significant' if sig else 'not significant'}"
        )
        return Shift(stat, va, vb, delta, _pct(delta, va), lo, hi, p, sig, why)
    if n < MIN_TAIL:
        return Shift(
            stat,
            va,
            vb,
            delta,
            _pct(delta, va),
            lo,
            hi,
            None,
            False,
            f"too few steps for a tail quantile ({len(x)} and {len(y)}; at least {MIN_TAIL} each)",
        )
    why = (
        f"{int(CONFIDENCE * 100)}% bootstrap interval of the change {lo:+.3f}..{hi:+.3f} ms: "
        f"{'excludes' if excludes_zero else 'includes'} zero"
    )
    return Shift(stat, va, vb, delta, _pct(delta, va), lo, hi, None, excludes_zero, why)


def compare_to_value(value: float, b: np.ndarray | list[float], stat: str) -> Shift:
    """Compare a sample's statistic with a single baseline ``value`` (a saved summary has no
    samples): significant when the baseline lies outside the sample's bootstrap interval."""
    y = np.asarray(b, dtype=float)
    if not len(y):
        return Shift(stat, value, None, None, None, None, None, None, False, "no steps")
    if stat == "mean":
        vb = float(y.mean())
        rng = np.random.default_rng(SEED)
        boots = _resampled_means(y, rng, N_BOOT)
        tail = (1.0 - CONFIDENCE) / 2.0
        lo, hi = (float(v) for v in np.quantile(boots, [tail, 1.0 - tail]))
    else:
        vb = float(np.quantile(y, QUANTILES[stat]))
        lo, hi = bootstrap_one(y, QUANTILES[stat])
    delta = vb - value
    need = MIN_TAIL if stat in ("p95", "p99") else MIN_STEPS
    if len(y) < need:
        return Shift(
            stat,
            value,
            vb,
            delta,
            _pct(delta, value),
            None,
            None,
            None,
            False,
            f"too few steps to test ({len(y)}; at least {need})",
        )
    sig = not (lo <= value <= hi)
    why = (
        f"baseline {value:.3f} ms is {'outside' if sig else 'inside'} the {int(CONFIDENCE * 100)}% bootstrap "
        f"interval {lo:.3f}..{hi:.3f} ms of this profile's {stat}"
    )
    return Shift(stat, value, vb, delta, _pct(delta, value), lo - value, hi - value, None, sig, why)
