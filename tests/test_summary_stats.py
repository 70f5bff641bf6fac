"""Summary statistics checked against numpy on the same data."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.analysis.core.phases import phase_breakdown
from dlscope.analysis.core.steps import step_stats
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta


def make_profile(tmp_path, durations, phase_durations, batch_size=32):
    starts = np.concatenate([[10**18], 10**18 + np.cumsum(durations)[:-1]]).astype(np.int64)
    ends = starts + np.asarray(durations, np.int64)
    n = len(durations)
    b = ProfileBuilder()
    b.add(
        "steps",
        pa.table(
            {
                "rank": np.zeros(n, np.int32),
                "step": np.arange(n, dtype=np.int32),
                "start_ns": starts,
                "end_ns": ends,
                "source": ["dlscope"] * n,
                "warmup": [i == 0 for i in range(n)],
            }
        ),
    )
    names, ps, pe = [], [], []
    for i in range(n):
        t = starts[i]
        for name, d in phase_durations(i):
            names.append(name)
            ps.append(t)
            pe.append(t + d)
            t += d
    m = len(names)
    b.add(
        "phases",
        pa.table(
            {
                "rank": np.zeros(m, np.int32),
                "pid": [1] * m,
                "tid": [1] * m,
                "start_ns": ps,
                "end_ns": pe,
                "name": names,
                "kind": ["range"] * m,
                "source": ["dlscope"] * m,
            }
        ),
    )
    meta = Meta(batch_size=batch_size, warmup_steps=1)
    b.write(tmp_path / "s.dlscope", meta)
    return tmp_path / "s.dlscope"


def test_step_stats_equal_numpy(tmp_path):
    rng = np.random.default_rng(1)
    durs = rng.integers(5_000_000, 9_000_000, size=101)
    path = make_profile(tmp_path, durs, lambda i: [("a", 1_000_000), ("b", 2_000_000)])
    s = step_stats(ProfileData.open(path))
    d = durs[1:] / 1e6  # warm-up step 0 excluded
    assert s.count == 100 and s.warmup_excluded == [0] and s.total_steps == 101
    assert np.isclose(s.mean_ms, d.mean())
    assert np.isclose(s.p50_ms, np.percentile(d, 50))
    assert np.isclose(s.p95_ms, np.percentile(d, 95))
    assert np.isclose(s.p99_ms, np.percentile(d, 99))
    assert np.isclose(s.std_ms, d.std(ddof=1))
    assert np.isclose(s.steps_per_s, 1000 / d.mean())
    assert np.isclose(s.samples_per_s, 32 * 1000 / d.mean())
    # an explicit range overrides the warm-up default
    s2 = step_stats(ProfileData.open(path, Selection(iter_start=0, iter_stop=9)))
    assert s2.count == 10 and np.isclose(s2.mean_ms, durs[:10].mean() / 1e6)


def test_phase_breakdown_equals_direct_sums(tmp_path):
    rng = np.random.default_rng(2)
    durs = np.full(20, 10_000_000)
    per = rng.integers(100_000, 3_000_000, size=(20, 2))
    path = make_profile(tmp_path, durs, lambda i: [("pre", int(per[i, 0])), ("run", int(per[i, 1]))])
    rows = {r.name: r for r in phase_breakdown(ProfileData.open(path))}
    assert list(rows) == ["pre", "run"]  # in step order
    for j, name in enumerate(("pre", "run")):
        sel = per[1:, j]
        assert rows[name].count == 19
        assert np.isclose(rows[name].total_ms, sel.sum() / 1e6)
        assert np.isclose(rows[name].mean_ms, sel.sum() / 1e6 / 19)
        assert np.isclose(rows[name].pct_of_step, 100 * sel.sum() / durs[1:].sum())
