"""Interval arithmetic in SQL: unions of time intervals and how much of each row they cover.

Several reports ask "how much of this time was covered by that activity" (GPU busy vs idle,
copies overlapping compute, idle gaps under a data-loading phase). Both helpers are set-based
(window functions and an ASOF join), so they cost O(n log n) however many rows there are; an
interval join on ``a.start < b.end AND b.start < a.end`` with an equality key degenerates into
a per-key cross product in DuckDB.

Every helper takes SQL text for its inputs (a subquery or a view name) with ``start_ns`` and
``end_ns`` columns plus the key columns, and returns SQL text.
"""

from __future__ import annotations


def union_sql(src: str, keys: str) -> str:
    """Disjoint, sorted islands ``(keys..., start_ns, end_ns)`` covering the union of the
    intervals in ``src`` per key. Intervals that touch (one starts where another ends) merge,
    as HTA's ``merge_kernel_intervals`` does. ``keys`` is a comma-separated column list."""
    return f"""
    SELECT {keys}, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM (
        SELECT *, sum(CASE WHEN start_ns <= prev_end THEN 0 ELSE 1 END)
                      OVER (PARTITION BY {keys} ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
        FROM (SELECT {keys}, start_ns, end_ns,
                     max(end_ns) OVER (PARTITION BY {keys} ORDER BY start_ns, end_ns
                                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
              FROM ({src}) WHERE start_ns IS NOT NULL AND end_ns >= start_ns))
    GROUP BY {keys}, island"""


def covered_sql(rows: str, islands: str, keys: tuple[str, ...]) -> str:
    """``rows`` with a column ``covered_ns``: how much of each row's [start_ns, end_ns) lies in
    ``islands`` (disjoint intervals, e.g. from :func:`union_sql`) of the same key.

    With C(t) = total island length before t, the covered part of [s, e) is C(e) - C(s); C is
    read with an ASOF join on the last island starting at or before t."""
    on = " AND ".join(f"r.{k} = i.{k}" for k in keys)
    part = ", ".join(keys)

    def c_at(col: str) -> str:
        return f"""SELECT r._rid, coalesce(i.before + least(r.{col}, i.end_ns) - i.start_ns, 0) AS c
                   FROM r ASOF LEFT JOIN isl i ON {on} AND r.{col} >= i.start_ns"""

    return f"""
    WITH isl AS MATERIALIZED (SELECT {part}, start_ns, end_ns,
                        coalesce(sum(end_ns - start_ns) OVER (PARTITION BY {part} ORDER BY start_ns
                                 ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
                 FROM ({islands})),
         r AS MATERIALIZED (SELECT row_number() OVER () AS _rid, * FROM ({rows})),
         cs AS ({c_at("start_ns")}),
         ce AS ({c_at("end_ns")})
    SELECT r.* EXCLUDE (_rid), (ce.c - cs.c)::BIGINT AS covered_ns
    FROM r JOIN cs USING (_rid) JOIN ce USING (_rid)"""


def total_covered_sql(windows: str, islands: str, keys: tuple[str, ...]) -> str:
    """Per key: ``window_ns`` (summed length of ``windows``) and ``covered_ns`` (how much of it
    ``islands`` cover). ``windows`` should be disjoint for the total to mean wall time."""
    part = ", ".join(keys)
    return f"""SELECT {part}, sum(end_ns - start_ns)::BIGINT AS window_ns, sum(covered_ns)::BIGINT AS covered_ns
               FROM ({covered_sql(windows, islands, keys)}) GROUP BY {part}"""


# Range joins (a sample inside a step, a phase overlapping a step) compare every pair when DuckDB
# plans them as a hash join on rank plus a filter: 40k steps by 72k samples took over a minute.
# Cutting time into buckets turns them into equi-joins on the bucket, then the exact condition
# is applied to the few candidates that share one.
RANGE_BUCKETS = 50_000


def _bucket_width(spans: str) -> str:
    return f"(SELECT greatest(1, (max(end_ns) - min(start_ns)) // {RANGE_BUCKETS})::BIGINT FROM ({spans}))"


def _expanded(src: str, width: str) -> str:
    """``src`` rows repeated once per bucket they touch, with ``_b`` (zero-length ones: once)."""
    return f"""SELECT *, unnest(generate_series(start_ns // {width}, greatest(end_ns - 1, start_ns) // {width})) AS _b
               FROM ({src}) WHERE end_ns >= start_ns"""


def points_in_sql(points: str, intervals: str, select: str) -> str:
    """SQL: ``select`` (over aliases ``p``, ``i``) for every pair of a point of ``points`` (a
    ``ts_ns`` column) and an interval of ``intervals`` (``start_ns``, ``end_ns``) holding it,
    ``start_ns <= ts_ns < end_ns``. Each pair once; intervals may overlap."""
    w = _bucket_width(intervals)
    return f"""SELECT {select} FROM (SELECT *, ts_ns // {w} AS _b FROM ({points})) p
               JOIN ({_expanded(intervals, w)}) i ON p._b = i._b
               WHERE p.ts_ns >= i.start_ns AND p.ts_ns < i.end_ns"""


def overlaps_sql(left: str, right: str, select: str) -> str:
    """SQL: ``select`` (over aliases ``a``, ``b``) for every pair of intervals of ``left`` and
    ``right`` that overlap (``a.start_ns < b.end_ns AND a.end_ns > b.start_ns``), each pair once:
    in the bucket where their overlap begins."""
    w = _bucket_width(f"SELECT start_ns, end_ns FROM ({left}) UNION ALL SELECT start_ns, end_ns FROM ({right})")
    return f"""SELECT {select} FROM ({_expanded(left, w)}) a JOIN ({_expanded(right, w)}) b ON a._b = b._b
               WHERE a.start_ns < b.end_ns AND a.end_ns > b.start_ns
                 AND a._b = greatest(a.start_ns, b.start_ns) // {w}"""
