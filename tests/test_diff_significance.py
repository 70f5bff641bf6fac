"""The step-time tests of `dlscope diff` / `check` against scipy (a test dependency only: the
implementation is numpy)."""

from __future__ import annotations

import numpy as np
import pytest

from dlscope.analysis.compare.significance import (
    bootstrap_diff,
    compare_samples,
    compare_to_value,
    mann_whitney,
)

stats = pytest.importorskip("scipy.stats")


@pytest.mark.parametrize(
    "n1,n2,shift,rounding",
    [
        (3, 4, 0.0, None),
        (5, 8, 1.0, None),
        (8, 30, 0.8, None),
        (2, 2, 3.0, None),  # exact (no ties, a side <= 8)
        (20, 25, 0.7, None),
        (100, 80, 0.5, None),  # normal approximation
        (30, 5, 0.5, 1),
        (40, 40, 0.3, 0),  # ties: normal approximation with the tie correction
    ],
)
def test_mann_whitney_matches_scipy(n1, n2, shift, rounding):
    rng = np.random.default_rng(n1 * 100 + n2)
    a, b = rng.normal(10, 1, n1), rng.normal(10 + shift, 1, n2)
    if rounding is not None:
        a, b = np.round(a, rounding), np.round(b, rounding)
    u, p, method = mann_whitney(a, b)
    ref = stats.mannwhitneyu(a, b, alternative="two-sided", method=method)
    assert u == ref.statistic
    assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)
    # scipy's own choice of method ('auto') is the one made here
    assert p == pytest.approx(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue, rel=1e-9, abs=1e-15)


def test_a_known_shift_is_found_and_measured():
    rng = np.random.default_rng(7)
    a = rng.normal(50.0, 2.0, 60)  # step times (ms) with a 3 ms regression
    b = rng.normal(53.0, 2.0, 60)
    s = compare_samples(a, b, "p50")
    assert s.significant
    assert s.p_value == pytest.approx(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue, rel=1e-9)
    assert s.ci_low < 3.0 < s.ci_high  # the interval holds the true shift of the median
    assert s.delta == pytest.approx(np.median(b) - np.median(a))


def test_no_shift_is_not_significant():
    rng = np.random.default_rng(11)
    a, b = rng.normal(50.0, 2.0, 40), rng.normal(50.0, 2.0, 40)
    s = compare_samples(a, b, "p50")
    assert s.p_value > 0.05 and not s.significant
    assert s.ci_low < 0 < s.ci_high


def test_bootstrap_interval_agrees_with_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.gamma(4.0, 5.0, 80), rng.gamma(4.0, 5.0, 70) + 4.0

    def median_diff(x, y, axis):
        return np.median(y, axis=axis) - np.median(x, axis=axis)

    ref = stats.bootstrap(
        (a, b),
        median_diff,
        method="percentile",
        n_resamples=4000,
        vectorized=True,
        random_state=np.random.default_rng(5),
    ).confidence_interval
    lo, hi = bootstrap_diff(a, b, 0.5)
    width = ref.high - ref.low
    # two independent resamplings of the same distribution: the ends agree to a fraction of the width
    assert abs(lo - ref.low) < 0.15 * width and abs(hi - ref.high) < 0.15 * width


def test_bootstrap_interval_covers_the_true_shift():
    rng = np.random.default_rng(21)
    covered = 0
    trials = 100
    for i in range(trials):
        a, b = rng.normal(20.0, 1.0, 40), rng.normal(21.0, 1.0, 40)  # medians differ by exactly 1
        lo, hi = bootstrap_diff(a, b, 0.5, n_boot=1000, seed=i)
        covered += lo <= 1.0 <= hi
    assert covered >= 85  # nominally 95%; the percentile bootstrap of a median runs a little under


def test_tail_quantiles_need_enough_steps():
    rng = np.random.default_rng(2)
    a, b = rng.normal(10, 1, 6), rng.normal(20, 1, 6)
    s = compare_samples(a, b, "p99")
    assert not s.significant and "too few steps for a tail" in s.why
    a, b = rng.normal(10, 1, 200), rng.normal(12, 1, 200)
    s = compare_samples(a, b, "p95")
    assert s.significant and s.ci_low < 2.0 < s.ci_high


def test_too_few_steps_give_no_verdict():
    s = compare_samples([40.0, 50.0], [30.0, 33.0], "p50")
    assert not s.significant and s.ci_low is None and "too few steps" in s.why
    assert s.delta == pytest.approx(31.5 - 45.0)


def test_single_baseline_value():
    rng = np.random.default_rng(4)
    b = rng.normal(100.0, 3.0, 50)
    assert compare_to_value(90.0, b, "p50").significant
    assert not compare_to_value(float(np.median(b)), b, "p50").significant
    assert compare_to_value(90.0, b, "mean").delta == pytest.approx(b.mean() - 90.0)


@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_long_runs_draw_the_same_bootstrap_distribution_without_resampling(q):
    """Past RESAMPLE_MAX_N steps each replicate's quantile is drawn from its order statistics'
    Beta distributions instead of resampling every step: the replicates' distribution equals
    brute-force resampling's (and the interval scipy's percentile bootstrap gives)."""
    from dlscope.analysis.compare import significance as sig

    rng = np.random.default_rng(11)
    x = rng.gamma(3.0, 2.0, 6000) + 10.0  # 6,000 steps: a long run's skewed step times, some ties
    x = np.round(x, 2)
    assert len(x) > sig.RESAMPLE_MAX_N
    direct = sig._resampled_quantiles(x, q, np.random.default_rng(1), 4000)
    brute = np.quantile(x[np.random.default_rng(2).integers(0, len(x), size=(1500, len(x)))], q, axis=1)
    spread = np.quantile(brute, 0.975) - np.quantile(brute, 0.025)
    for p in (0.025, 0.25, 0.5, 0.75, 0.975):
        assert abs(np.quantile(direct, p) - np.quantile(brute, p)) < 0.12 * spread, p
    ref = stats.bootstrap(
        (x,),
        lambda s, axis: np.quantile(s, q, axis=axis),
        method="percentile",
        n_resamples=1500,
        vectorized=True,
        random_state=np.random.default_rng(4),
    ).confidence_interval
    lo, hi = np.quantile(direct, [0.025, 0.975])
    assert abs(lo - ref.low) < 0.15 * spread and abs(hi - ref.high) < 0.15 * spread


def test_long_runs_mean_interval_matches_resampling():
    from dlscope.analysis.compare import significance as sig

    rng = np.random.default_rng(12)
    x = rng.lognormal(2.0, 0.4, 5000)
    direct = sig._resampled_means(x, np.random.default_rng(1), 4000)
    brute = x[np.random.default_rng(2).integers(0, len(x), size=(1500, len(x)))].mean(axis=1)
    spread = np.quantile(brute, 0.975) - np.quantile(brute, 0.025)
    for p in (0.025, 0.5, 0.975):
        assert abs(np.quantile(direct, p) - np.quantile(brute, p)) < 0.1 * spread
    # and a whole comparison of two long runs: a 1% shift of the median is found
    a = rng.gamma(3.0, 2.0, 50_000) + 100.0
    b = rng.gamma(3.0, 2.0, 50_000) + 101.0
    s = compare_samples(a, b, "p50")
    assert s.significant and s.ci_low < 1.0 < s.ci_high
