"""The numpy interval helpers against a brute-force count of covered integer points and against
their SQL twins (:mod:`dlscope.analysis.core.intervals`): the idle breakdown, the headline and the
replay switched from one to the other, so they must give the same integers."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dlscope.analysis.core import interval_arrays as ia
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.intervals import covered_sql, union_sql

from .report_helpers import fixture_path, imported


def _points(starts, ends) -> set[int]:
    out: set[int] = set()
    for s, e in zip(starts, ends):
        out.update(range(int(s), int(e)))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_union_and_coverage_equal_brute_force_and_sql(seed):
    rng = np.random.default_rng(seed)
    n = 80
    rank = rng.integers(0, 3, n)
    device = rng.integers(0, 2, n)
    start = rng.integers(0, 400, n)
    end = start + rng.integers(-3, 40, n)  # zero-length and reversed intervals too (dropped)
    s = {"rank": rank, "device": device, "start_ns": start, "end_ns": end}
    isl = ia.union(s)
    keep = end >= start
    for r in range(3):
        mine = isl["rank"] == r
        st, en = isl["start_ns"][mine], isl["end_ns"][mine]
        assert np.all(en[:-1] < st[1:])  # sorted, disjoint, not touching
        sel = keep & (rank == r)
        assert _points(st, en) == _points(start[sel], end[sel])

    con = duckdb.connect()
    con.register("a", pa.table(s))
    for keys in (("rank",), ("rank", "device")):
        cols = ", ".join(keys)
        want = con.execute(
            f"SELECT {cols}, start_ns, end_ns FROM ({union_sql('SELECT * FROM a', cols)}) ORDER BY {cols}, start_ns"
        ).fetchall()
        got = ia.union(s, keys)
        assert list(zip(*(got[k].tolist() for k in (*keys, "start_ns", "end_ns")))) == want

    qs = rng.integers(0, 450, 30)
    qe = qs + rng.integers(1, 80, 30)
    qr = rng.integers(0, 4, 30)  # rank 3 has no islands: covers nothing
    got = ia.covered(qr, qs, qe, isl)
    con.register("q", pa.table({"rank": qr, "start_ns": qs, "end_ns": qe, "i": np.arange(30)}))
    sql = dict(
        con.execute(
            "SELECT i, covered_ns FROM"
            f" ({covered_sql('SELECT * FROM q', union_sql('SELECT * FROM a', 'rank'), ('rank',))})"
        ).fetchall()
    )
    for i in range(30):
        sel = keep & (rank == qr[i])
        assert got[i] == len(_points(start[sel], end[sel]) & set(range(qs[i], qe[i]))) == sql[i]


def test_touching_merge_null_bounds_and_empty_sets():
    s = {
        "rank": np.array([0, 0, 0, 1]),
        "start_ns": np.ma.array([0, 10, 30, 5], mask=[0, 0, 1, 0]),
        "end_ns": np.array([10, 20, 40, 6]),
    }
    got = ia.union(s)
    # [0, 10) and [10, 20) touch: one island; the row with a NULL start is left out
    assert got["rank"].tolist() == [0, 1]
    assert got["start_ns"].tolist() == [0, 5]
    assert got["end_ns"].tolist() == [20, 6]
    empty = ia.union(
        {"rank": np.zeros(0, np.int64), "start_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64)}
    )
    assert all(len(v) == 0 for v in empty.values())
    assert ia.covered(np.array([0]), np.array([0]), np.array([5]), empty).tolist() == [0]


def test_real_profile_islands_and_step_coverage_equal_sql(tmp_path_factory):
    """The H100 GPT trace: the GPU's islands and each step's busy time as numpy and as SQL."""
    src = fixture_path("h100_gpt6_bf16")
    if not src.exists():
        pytest.skip(f"{src} is not here")
    data = ProfileData.open(imported(src, tmp_path_factory))
    work = (
        "SELECT rank, start_ns, end_ns FROM kernels UNION ALL SELECT rank, start_ns, end_ns FROM memcpy "
        "UNION ALL SELECT rank, start_ns, end_ns FROM memset"
    )
    want = data.con.execute(
        f"SELECT rank, start_ns, end_ns FROM ({union_sql(work, 'rank')}) ORDER BY rank, start_ns"
    ).fetchall()
    got = ia.union(data.con.execute(work).fetchnumpy())
    assert len(want) > 100
    assert list(zip(got["rank"].tolist(), got["start_ns"].tolist(), got["end_ns"].tolist())) == want
    steps = data.con.execute("SELECT rank, step, start_ns, end_ns FROM steps ORDER BY step").fetchnumpy()
    busy = ia.covered(steps["rank"], steps["start_ns"], steps["end_ns"], got)
    sql = data.con.execute(
        f"SELECT covered_ns FROM ({covered_sql('SELECT * FROM steps', union_sql(work, 'rank'), ('rank',))}) "
        "ORDER BY step"
    ).fetchall()
    assert busy.tolist() == [r[0] for r in sql]
    assert busy.sum() > 0
