"""Interval arithmetic on numpy arrays: the twins of :mod:`.intervals` for a few sets that one
report combines many times.

The idle breakdown and the headline cover a few dozen windows with cumulative unions of tens of
thousands of intervals (GPU work, then the host's states). In SQL every union is two window
functions and a grouping and every coverage two ASOF joins, a third of a second per report on a
500k-event profile; here a union is a sort and a running maximum, a coverage a binary search.
The results are the same integers: :func:`union` merges touching intervals as
:func:`.intervals.union_sql` does, :func:`covered` reads C(end) - C(start) as
:func:`.intervals.covered_sql` does.

A set of intervals is a dict of three arrays, ``rank``, ``start_ns`` and ``end_ns`` (what
``fetchnumpy()`` returns for such a query).
"""

from __future__ import annotations

import numpy as np

Intervals = dict[str, np.ndarray]


def _plain(a: np.ndarray, dtype: type = np.int64) -> np.ndarray:
    return np.asarray(np.ma.getdata(a), dtype=dtype)


def concat(*sets: Intervals) -> Intervals:
    """The intervals of all ``sets`` (rows with a NULL bound dropped)."""
    out: dict[str, list[np.ndarray]] = {"rank": [], "start_ns": [], "end_ns": []}
    for s in sets:
        keep = ~(np.ma.getmaskarray(s["start_ns"]) | np.ma.getmaskarray(s["end_ns"]) | np.ma.getmaskarray(s["rank"]))
        for k in out:
            out[k].append(_plain(s[k])[keep])
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}


def union(s: Intervals) -> Intervals:
    """Disjoint islands per rank covering the union of ``s``, sorted by rank and start;
    intervals that touch merge (as :func:`.intervals.union_sql`)."""
    s = concat(s)
    ok = s["end_ns"] >= s["start_ns"]
    rank, start, end = s["rank"][ok], s["start_ns"][ok], s["end_ns"][ok]
    order = np.lexsort((end, start, rank))
    rank, start, end = rank[order], start[order], end[order]
    out: dict[str, list[np.ndarray]] = {"rank": [], "start_ns": [], "end_ns": []}
    for r in np.unique(rank):
        lo, hi = np.searchsorted(rank, r, "left"), np.searchsorted(rank, r, "right")
        st, en = start[lo:hi], end[lo:hi]
        reach = np.maximum.accumulate(en)  # the latest end so far: an island goes on while starts stay within it
        new = np.ones(len(st), dtype=bool)
        new[1:] = st[1:] > reach[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(st)) - 1
        out["rank"].append(np.full(len(first), r, dtype=np.int64))
        out["start_ns"].append(st[first])
        out["end_ns"].append(reach[last])
    return {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}


def covered(rank: np.ndarray, start: np.ndarray, end: np.ndarray, islands: Intervals) -> np.ndarray:
    """How much of each [start, end) lies in ``islands`` (disjoint, as :func:`union` makes
    them) of its rank: C(end) - C(start), C(t) the islands' length before t, read from the last
    island starting at or before t (as :func:`.intervals.covered_sql`)."""
    rank, start, end = _plain(rank), _plain(start), _plain(end)
    out = np.zeros(len(start), dtype=np.int64)
    i_rank = _plain(islands["rank"])
    for r in np.unique(i_rank):
        mine = i_rank == r
        s, e = _plain(islands["start_ns"])[mine], _plain(islands["end_ns"])[mine]
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        before = np.concatenate(([0], np.cumsum(e - s)[:-1]))

        def c(t: np.ndarray, s: np.ndarray = s, e: np.ndarray = e, before: np.ndarray = before) -> np.ndarray:
            i = np.searchsorted(s, t, side="right") - 1
            j = np.maximum(i, 0)
            return np.where(i >= 0, before[j] + np.minimum(t, e[j]) - s[j], 0)

        rows = rank == r
        out[rows] = c(end[rows]) - c(start[rows])
    return out
