"""The numpy nesting against a loop over start/end events written from its documented rules, on
intervals with every kind of tie (shared starts and ends, identical and zero-length ranges,
overlaps that do not nest), NULL groups and row ids out of order; and on the real H100 ops."""

from __future__ import annotations

import random

import duckdb
import numpy as np
import pytest

from dlscope.store.nesting import create_nesting_table, nest

from .conftest import DATA


def reference(rows: list[tuple[int, object, int, int]]) -> dict[int, tuple[int, int | None]]:
    """rows: (rid, group, start, end) -> rid: (depth, parent rid). Per group, events in order of
    time, then ends of ranges that ran, starts (longer first), ends of zero-length ranges, then
    rid; the depth is the count of open ranges; the parent the latest start one level up."""
    out: dict[int, tuple[int, int | None]] = {}
    groups: dict[object, list[tuple]] = {}
    for rid, g, s, e in rows:
        groups.setdefault(g, [])
        groups[g].append((s, 1, -e, rid, +1))
        groups[g].append((e, 2 if e == s else 0, -s, rid, -1))
    for events in groups.values():
        open_count = 0
        latest_at: dict[int, int] = {}
        for _, _, _, rid, d in sorted(events):
            if d > 0:
                out[rid] = (open_count, latest_at.get(open_count - 1))
                latest_at[open_count] = rid
            open_count += d
    return out


def _random_rows(rng: random.Random, n: int) -> list[tuple[int, object, int, int]]:
    rows = []
    rids = rng.sample(range(1, 10 * n), n)  # ids out of order
    for rid in rids:
        s = rng.choice([0, 10, 20, 20, 30, rng.randrange(0, 100)])
        e = s + rng.choice([0, 0, 5, 10, 10, 40, rng.randrange(0, 60)])
        rows.append((rid, rng.choice([1, 2, None]), s, e))
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_nest_follows_the_rules(seed):
    rows = _random_rows(random.Random(seed), 300)
    groups = np.ma.masked_array([g or 0 for _, g, _, _ in rows], mask=[g is None for _, g, _, _ in rows])
    rid = np.array([r for r, _, _, _ in rows])
    depth, parent = nest([groups], np.array([s for _, _, s, _ in rows]), np.array([e for _, _, _, e in rows]), rid)
    got = {int(r): (int(d), int(rid[p]) if p >= 0 else None) for r, d, p in zip(rid, depth, parent)}
    assert got == reference(rows)


def test_nest_of_nothing():
    depth, parent = nest(
        [np.array([], np.int64)], np.array([], np.int64), np.array([], np.int64), np.array([], np.int64)
    )
    assert len(depth) == len(parent) == 0


def test_real_ops_nest_as_the_rules_say(tmp_path):
    """The 4k ops of a real H100 trace, through DuckDB as the builder reads them."""
    from dlscope.importers.run import import_files

    profile = import_files([DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz"], tmp_path / "p.dlscope")
    con = duckdb.connect()
    con.execute(f"CREATE TABLE o AS SELECT op_id + 1 AS rid, * FROM '{profile}/ops.parquet'")
    rows = [
        (r, (rk, p, t), s, e)
        for r, rk, p, t, s, e in con.execute("SELECT rid, rank, pid, tid, start_ns, end_ns FROM o").fetchall()
    ]
    assert len(rows) > 1000
    ref = reference(rows)
    create_nesting_table(con, "o", ("rank", "pid", "tid"), "n")
    got = {r: (d, p) for r, d, p in con.execute("SELECT rid, depth, parent_rid FROM n").fetchall()}
    assert got == ref
    stored = {
        r: (d, None if p is None else p + 1)
        for r, d, p in con.execute("SELECT rid, depth, parent_id FROM o").fetchall()
    }
    assert stored == ref
