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
