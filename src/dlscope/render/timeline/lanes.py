"""Overflow lanes for slices that do not nest.

The Chrome trace format requires the slices of one thread to nest; Perfetto drops a slice that
overlaps its neighbour without nesting in it. Such overlaps are real: with programmatic dependent
launch a kernel starts a fraction of a microsecond before the previous one on its stream ends.
Rather than bend times, a slice that crosses its enclosing slice moves to an overflow lane (a
sibling track named "... overlap 1"), and so do its children; this repeats until every lane nests.

Most tracks nest already. Which do not is found for all tracks at once with numpy (one sort and
a range maximum); only those tracks go through the rounds of nesting in SQL.
"""

from __future__ import annotations

import duckdb
import numpy as np

from ...store import db

MAX_LANE_ROUNDS = 16


def _range_max(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """max(values[lo[q] : hi[q] + 1]) for each query q (lo <= hi), with a sparse table built one
    level at a time: level k holds the maxima of windows of 2**k values."""
    out = np.empty(len(lo), dtype=values.dtype)
    level = np.log2(hi - lo + 1).astype(np.int64)
    table, k = values, 0
    while len(lo):
        at = level == k
        if at.any():
            out[at] = np.maximum(table[lo[at]], table[hi[at] - (1 << k) + 1])
        if (level <= k).all():
            break
        table = np.maximum(table[: len(table) - (1 << k)], table[1 << k :])
        k += 1
    return out


def crossing_tracks(trk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The tracks (values of ``trk``) on which some slice [start, end) crosses another: one
    starts strictly inside the other and ends after it. The rows must be sorted by track, then
    start, then end descending (so that equal starts nest, the longer first)."""
    n = len(trk)
    if n < 2:
        return np.empty(0, dtype=trk.dtype)
    # the rows starting strictly inside row i are i+1 .. last[i] (equal starts come before i or
    # nest in it); row i is crossed when one of them ends after it
    bounds = np.flatnonzero(np.diff(trk)) + 1
    first = np.concatenate(([0], bounds))
    stop = np.concatenate((bounds, [n]))
    last = np.empty(n, dtype=np.int64)
    for a, b in zip(first, stop):
        last[a:b] = a + np.searchsorted(start[a:b], end[a:b], "left") - 1
    rows = np.flatnonzero(last > np.arange(n))
    if not len(rows):
        return np.empty(0, dtype=trk.dtype)
    crossed = _range_max(end, rows + 1, last[rows]) > end[rows]
    return np.unique(trk[rows[crossed]])


def assign_lanes(con: duckdb.DuckDBPyConnection, slices_sql: str) -> int:
    """Create ``tl_moved(trk, start_ns, end_ns, lane)``: the slices of ``slices_sql`` (columns
    trk, start_ns, end_ns) that go to overflow lane ``lane``. Returns how many slices moved.

    A moved slice is known by its track and times: identical slices of a track nest in each
    other and so move together."""
    data = db.query_arrow(con, f"SELECT trk, start_ns, end_ns FROM ({slices_sql}) ORDER BY trk, start_ns, end_ns DESC")
    trk, start, end = (data.column(c).to_numpy() for c in ("trk", "start_ns", "end_ns"))
    bad = crossing_tracks(trk, start, end)
    con.execute("CREATE OR REPLACE TEMP TABLE tl_moved (trk BIGINT, start_ns BIGINT, end_ns BIGINT, lane INTEGER)")
    if not len(bad):
        return 0
    from ...store.nesting import create_nesting_table

    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_lane AS
        SELECT row_number() OVER (ORDER BY trk, start_ns, end_ns) AS rid, 0 AS lane, trk, start_ns, end_ns
        FROM ({slices_sql}) WHERE trk IN ({", ".join(str(int(t)) for t in bad)})""")
    only = "TRUE"
    for _ in range(MAX_LANE_ROUNDS):
        src = f"(SELECT rid, trk, lane, start_ns, end_ns FROM tl_lane WHERE {only})"
        nesting = create_nesting_table(con, src, ("trk", "lane"), "tl_nesting")
        con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_cross AS
            SELECT n.rid FROM {nesting} n
            JOIN tl_lane c ON c.rid = n.rid JOIN tl_lane p ON p.rid = n.parent_rid
            WHERE c.end_ns > p.end_ns""")
        n = con.execute("SELECT count(*) FROM tl_cross").fetchall()[0][0]
        if not n:
            break
        con.execute("UPDATE tl_lane SET lane = lane + 1 WHERE rid IN (SELECT rid FROM tl_cross)")
        # only tracks that changed can break nesting in the next round
        only = "trk IN (SELECT DISTINCT trk FROM tl_lane WHERE rid IN (SELECT rid FROM tl_cross))"
    con.execute("""INSERT INTO tl_moved SELECT trk, start_ns, end_ns, max(lane) FROM tl_lane WHERE lane > 0
                   GROUP BY ALL""")
    return int(con.execute("SELECT count(*) FROM tl_lane WHERE lane > 0").fetchall()[0][0])
