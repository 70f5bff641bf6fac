"""The interval SQL helpers against a brute-force count of covered integer points."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from dlscope.analysis.core.intervals import covered_sql, total_covered_sql, union_sql


def _points(starts, ends) -> set[int]:
    """Half-open [s, e) intervals as the set of integer points they cover."""
    out: set[int] = set()
    for s, e in zip(starts, ends):
        out.update(range(s, e))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_union_and_coverage_equal_brute_force(seed):
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    n = 60
    keys = rng.integers(0, 3, n)
    starts = rng.integers(0, 400, n)
    ends = starts + rng.integers(0, 40, n)  # zero-length intervals too
    con.register("a", pa.table({"k": keys, "start_ns": starts, "end_ns": ends}))
    qs = rng.integers(0, 450, 25)
    qe = qs + rng.integers(1, 80, 25)
    qk = rng.integers(0, 3, 25)
    con.register("q", pa.table({"k": qk, "start_ns": qs, "end_ns": qe, "i": np.arange(25)}))

    islands = con.execute(
        f"SELECT k, start_ns, end_ns FROM ({union_sql('SELECT * FROM a', 'k')}) ORDER BY k, start_ns"
    ).fetchall()
    for key in range(3):
        mine = [(s, e) for k, s, e in islands if k == key]
        # disjoint, sorted, not touching
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(mine, mine[1:]))
        sel = keys == key
        assert (_points(*zip(*mine)) if mine else set()) == _points(starts[sel], ends[sel])
        assert sum(e - s for s, e in mine) == len(_points(starts[sel], ends[sel]))

    got = dict(
        con.execute(
            f"SELECT i, covered_ns FROM ({covered_sql('SELECT * FROM q', union_sql('SELECT * FROM a', 'k'), ('k',))})"
        ).fetchall()
    )
    for i in range(25):
        sel = keys == qk[i]
        want = len(_points(starts[sel], ends[sel]) & set(range(qs[i], qe[i])))
        assert got[i] == want

    tot = {
        k: (w, c)
        for k, w, c in con.execute(
            "SELECT * FROM"
            f" ({total_covered_sql(union_sql('SELECT * FROM q', 'k'), union_sql('SELECT * FROM a', 'k'), ('k',))})"
        ).fetchall()
    }
    for key, (w, c) in tot.items():
        qpts = _points(qs[qk == key], qe[qk == key])
        assert w == len(qpts)
        assert c == len(qpts & _points(starts[keys == key], ends[keys == key]))


def test_touching_intervals_merge_like_hta():
    con = duckdb.connect()
    con.register("a", pa.table({"k": [0, 0, 0], "start_ns": [0, 10, 25], "end_ns": [10, 20, 30]}))
    assert con.execute(f"SELECT start_ns, end_ns FROM ({union_sql('SELECT * FROM a', 'k')}) ORDER BY 1").fetchall() == [
        (0, 20),
        (25, 30),
    ]
