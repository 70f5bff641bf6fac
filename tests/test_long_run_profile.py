"""A real 10-minute default-mode run on the H100 (bench/long_run.py --seconds 600 --keep:
101,483 steps with three phases each, 121,656 NVML samples, the PyTorch layer's traced window).
Its summary took 27.6 s and `dlscope diff` over a minute because range joins and the bootstrap
compared every pair; the numbers that come out of the faster paths are checked here against
numpy on the profile's own tables."""

from __future__ import annotations

import numpy as np
import pytest

from dlscope.analysis.compare.diff import compare
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.measures.memory_peak import memory_peak
from dlscope.analysis.reports.gpu_metrics import compute as gpu_metrics

from .conftest import DATA

PROFILE = DATA / "gpu_h100" / "long_10min_default.dlscope"


@pytest.fixture(scope="module")
def data():
    if not PROFILE.is_dir():
        pytest.skip("the 10-minute H100 profile is not in tests/data")
    return ProfileData.open(PROFILE)


def _arrays(data, sql):
    t = data.table(sql)
    return {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}


def _in_steps(ts, starts, ends):
    """For each time: the index of the step holding it, or -1 (steps are disjoint and sorted)."""
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & (ts < ends[np.maximum(i, 0)])
    return np.where(ok, i, -1)


def test_the_run_is_long(data):
    assert data.meta.table_rows["steps"] == 101_483 and data.meta.table_rows["counters"] == 121_656
    assert data.scalar("SELECT count(*) FROM stat_steps") == 101_476  # warm-up and the traced window out


def test_samples_per_step_and_metric_equal_numpy(data):
    steps = _arrays(data, "SELECT step, start_ns, end_ns FROM sel_steps ORDER BY start_ns")
    c = _arrays(data, "SELECT metric, ts_ns, value FROM counters")
    where = _in_steps(c["ts_ns"], steps["start_ns"], steps["end_ns"])
    table = gpu_metrics(data).table
    rows = [r for r in table.to_pylist() if r["scope"] == "steps"]
    assert rows
    for r in rows:
        sel = (c["metric"] == r["metric"]) & (where >= 0)
        assert r["samples"] == int(sel.sum()), r["metric"]
        assert r["mean"] == pytest.approx(float(c["value"][sel].mean()), rel=1e-9)
        assert r["max"] == pytest.approx(float(c["value"][sel].max()))
    per_step = [r for r in table.to_pylist() if r["scope"] == "step" and r["metric"] == "gpu_util"]
    sel = (c["metric"] == "gpu_util") & (where >= 0)
    assert len(per_step) == len(np.unique(where[sel]))


def test_memory_peak_and_its_step_equal_numpy(data):
    peak = memory_peak(data)
    assert not isinstance(peak, str)
    steps = _arrays(data, "SELECT step, start_ns, end_ns FROM sel_steps ORDER BY start_ns")
    c = _arrays(data, "SELECT ts_ns, value FROM counters WHERE metric = 'mem_used'")
    where = _in_steps(c["ts_ns"], steps["start_ns"], steps["end_ns"])
    inside = where >= 0
    assert peak.peak_bytes == float(c["value"][inside].max())
    holders = set(steps["step"][where[inside][c["value"][inside] == peak.peak_bytes]].tolist())
    assert peak.peak_step in holders


def test_diff_of_the_run_with_itself(data):
    """The run against itself: no significant change of any step statistic, with intervals
    narrow enough to see a 1% change of the 5.9 ms median step (2% of the 7 ms P99)."""
    d = compare(data, data)
    shifts = {s.stat: s for s in d.shifts}
    assert set(shifts) >= {"p50", "p95", "p99", "mean"}
    for s in shifts.values():
        assert s.delta == 0 and not s.significant
        assert s.ci_high - s.ci_low < (0.06 if s.stat in ("p50", "mean") else 0.15)  # ms
