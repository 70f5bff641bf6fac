"""Where in the program a runtime call was made: its framework op, the outermost op around it,
and the application phase it ran in. Rules name these so the advice points at code.

Every helper takes SQL rows with ``rank``, ``pid``, ``tid``, ``start_ns`` and ``external_id``
(runtime calls) and returns them with ``op`` (the innermost framework op, linked by external id),
``top_op`` (the outermost op on the same thread around the call) and ``phase`` (the innermost
shown application phase of the same process around it). ASOF joins, so cost grows as
n log n with the number of rows.
"""

from __future__ import annotations

from .context import ProfileData
from .kernel_names import kernel_op_join
from .phases import EXCLUDED_DOMAINS


def with_place_sql(data: ProfileData, rows: str) -> str:
    """``rows`` plus op, top_op and phase (NULL where unknown)."""
    sql = f"SELECT r.*, NULL::VARCHAR AS op, NULL::VARCHAR AS top_op FROM ({rows}) r"
    if data.has("ops"):
        sql = f"""
        SELECT r.*, o.name AS op, CASE WHEN t.end_ns > r.start_ns THEN t.name END AS top_op
        FROM ({rows}) r
        {kernel_op_join(data, "r")}
        ASOF LEFT JOIN (SELECT rank, tid, start_ns, end_ns, name FROM ops WHERE coalesce(depth, 0) = 0) t
          ON t.rank = r.rank AND t.tid = r.tid AND r.start_ns >= t.start_ns"""
    if not data.has("phases"):
        return f"SELECT s.*, NULL::VARCHAR AS phase FROM ({sql}) s"
    excluded = ", ".join(f"'{d}'" for d in EXCLUDED_DOMAINS)
    shown = f"""SELECT rank, coalesce(pid, -1) AS pid, start_ns, end_ns, name, depth FROM phases
                WHERE kind = 'range' AND coalesce(domain, '') NOT IN ({excluded})"""
    # the latest phase to start before the call is the innermost one around it, unless it has
    # already ended (a sibling): then fall back to the outermost phase around the call
    return f"""
    SELECT s.* EXCLUDE (i_end, i_name, o_end, o_name),
           CASE WHEN s.i_end > s.start_ns THEN s.i_name WHEN s.o_end > s.start_ns THEN s.o_name END AS phase
    FROM (SELECT q.*, i.end_ns AS i_end, i.name AS i_name, o.end_ns AS o_end, o.name AS o_name
          FROM ({sql}) q
          ASOF LEFT JOIN ({shown}) i
            ON i.rank = q.rank AND i.pid = coalesce(q.pid, -1) AND q.start_ns >= i.start_ns
          ASOF LEFT JOIN ({shown} AND coalesce(depth, 0) = 0) o
            ON o.rank = q.rank AND o.pid = coalesce(q.pid, -1) AND q.start_ns >= o.start_ns) s"""
