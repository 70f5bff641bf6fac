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


def concat(*sets: Intervals, keys: tuple[str, ...] = ("rank",)) -> Intervals:
    """The intervals of all ``sets`` (rows with a NULL bound or key dropped)."""
    cols = (*keys, "start_ns", "end_ns")
    out: dict[str, list[np.ndarray]] = {c: [] for c in cols}
    for s in sets:
        keep = ~np.logical_or.reduce([np.ma.getmaskarray(s[c]) for c in cols])
        for c in cols:
            out[c].append(_plain(s[c])[keep])
    return {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in out.items()}


def union(s: Intervals, keys: tuple[str, ...] = ("rank",)) -> Intervals:
    """Disjoint islands per key (a rank by default) covering the union of ``s``, sorted by key
    and start; intervals that touch merge (as :func:`.intervals.union_sql`)."""
    s = concat(s, keys=keys)
    ok = s["end_ns"] >= s["start_ns"]
    s = {c: v[ok] for c, v in s.items()}
    order = np.lexsort((s["end_ns"], s["start_ns"], *(s[k] for k in reversed(keys))))
    s = {c: v[order] for c, v in s.items()}
    start, end = s["start_ns"], s["end_ns"]
    n = len(start)
    if not n:
        return s
    # a new group where any key changes; within one, an island goes on while starts stay within
    # the latest end so far
    group_start = np.ones(n, dtype=bool)
    group_start[1:] = np.logical_or.reduce([s[k][1:] != s[k][:-1] for k in keys])
    bounds = np.append(np.flatnonzero(group_start), n)
    reach = np.empty(n, dtype=np.int64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        reach[lo:hi] = np.maximum.accumulate(end[lo:hi])
    new = group_start.copy()
    new[1:] |= start[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], n) - 1
    out = {k: s[k][first] for k in keys}
    out["start_ns"] = start[first]
    out["end_ns"] = reach[last]
    return out


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
