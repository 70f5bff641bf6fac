"""The JSON text of every event, and the launch -> GPU flow arrows, as rows made by one query.

Each row is one unit that must stay in one file: a slice, an instant, a counter sample, or GPU
work with the flow from its launch (its start and finish events). ``anchor_ns`` decides which part
of a split timeline the row goes to: GPU work and its flow go where the API call that launched it
goes, so every arrow finds both of its ends in the same file. Each line begins with the separator
(the metadata events come first), so that rows written in order make the file's event list.
"""

from __future__ import annotations

import duckdb

from .events import TRACK_KEYS, Source

_ON_KEYS = " AND ".join(f"k.{c} = e.{c}" for c in TRACK_KEYS)


def _events_sql(src: Source, moved: bool) -> str:
    """``src``'s rows with their JSON pieces and ``pt``, the text of their track's pid and tid."""
    cols = (
        f"{src.keys_sql()}, {src.start} AS start_ns, {src.end} AS end_ns, {src.corr} AS corr, "
        f"{src.cat} AS cat, coalesce({src.name}, '\"\"') AS name, {src.args} AS args"
    )
    lane = ""
    pt = "k.pt"
    if moved and src.ph == "X":
        lane = "LEFT JOIN tl_moved m ON m.trk = k.trk AND m.start_ns = e.start_ns AND m.end_ns = e.end_ns"
        pt = "coalesce(m.pt, k.pt)"
    return f"""SELECT e.*, {pt} AS pt FROM (SELECT {cols} {src.from_sql()}) e
        JOIN tl_tracks k ON {_ON_KEYS} AND k.lane = 0 {lane}"""


def _line(ph: str) -> str:
    """SQL of one event's text from the columns of ``_events_sql``."""
    if ph == "X":
        return """concat(',\n{"ph":"X","cat":', cat, ',"name":', name, pt, tl_us(start_ns),
            ',"dur":', tl_dur(end_ns - start_ns), ',"args":{', args, '}}')"""
    if ph == "i":
        return """concat(',\n{"ph":"i","s":"t","cat":', cat, ',"name":', name, pt, tl_us(start_ns),
            ',"args":{', args, '}}')"""
    return """concat(',\n{"ph":"C","name":', name, pt, tl_us(start_ns), ',"args":{', args, '}}')"""


# a flow's "s" binds to the slice enclosing it on the API thread (the call, which starts at the same
# time), its "f" with bp "e" to the GPU slice enclosing its time (the kernel itself)
_FLOW = """',\n{"ph":"s","cat":"ac2g","name":"launch","id":', fid, (l.a).pt, tl_us((l.a).start_ns),
    '},\n{"ph":"f","bp":"e","cat":"ac2g","name":"launch","id":', fid, g.pt, tl_us(g.start_ns), '}'"""


def rows_sql(con: duckdb.DuckDBPyConnection, sources: list[Source], moved: bool) -> str:
    """SQL of the rows ``(anchor_ns, nev, line)`` of ``sources`` placed on ``tl_tracks`` (and
    ``tl_moved`` when ``moved``); creates ``tl_launch``, the launches the flows start from. The
    rows come in no particular order: the format does not ask for one (viewers sort by time)."""
    # the launching call of each GPU row: the first API call with its correlation id on its rank
    api = [s for s in sources if s.kind == "api"]
    launch = " UNION ALL ".join(
        f"""SELECT rank, corr, {{'start_ns': start_ns, 'pt': pt}} AS a
            FROM ({_events_sql(s, moved)}) WHERE corr IS NOT NULL"""
        for s in api
    )
    if api:
        con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_launch AS
            SELECT rank, corr, min(a) AS a FROM ({launch}) GROUP BY rank, corr""")
    else:
        con.execute("""CREATE OR REPLACE TEMP TABLE tl_launch
            (rank INTEGER, corr BIGINT, a STRUCT(start_ns BIGINT, pt VARCHAR))""")
    gpu = " UNION ALL ".join(_events_sql(s, moved) for s in sources if s.gpu)
    parts = [
        f"SELECT start_ns AS anchor_ns, 1 AS nev, {_line(s.ph)} AS line FROM ({_events_sql(s, moved)})"
        for s in sources
        if not s.gpu
    ]
    if gpu:
        # GPU work and its flow in one row (they share the anchor: never in different files); flow
        # ids in time order, the same whichever rows a part keeps
        parts.append(f"""SELECT coalesce((l.a).start_ns, g.start_ns) AS anchor_ns,
                CASE WHEN l.a IS NULL THEN 1 ELSE 3 END AS nev,
                CASE WHEN l.a IS NULL THEN g.line ELSE concat(g.line, {_FLOW}) END AS line
            FROM (SELECT *, {_line("X")} AS line,
                         row_number() OVER (ORDER BY start_ns, end_ns, rank, dev, stream, corr) AS fid
                  FROM ({gpu})) g
            LEFT JOIN tl_launch l ON l.rank = g.rank AND l.corr = g.corr""")
    return " UNION ALL ".join(parts)


def count_sql(sources: list[Source]) -> str:
    """SQL of (rows, events, flows) of ``rows_sql`` (after it), without making any text."""
    rows = " UNION ALL ".join(f"SELECT count(*) AS n {s.from_sql(names=False)}" for s in sources)
    gpu = " UNION ALL ".join(f"SELECT t.rank, {s.corr} AS corr {s.from_sql(names=False)}" for s in sources if s.gpu)
    flows = f"SELECT count(*) FROM ({gpu}) g JOIN tl_launch l ON l.rank = g.rank AND l.corr = g.corr" if gpu else "0"
    return f"SELECT n, n + 2 * f, f FROM (SELECT (SELECT sum(n) FROM ({rows}))::BIGINT AS n, ({flows}) AS f)"
