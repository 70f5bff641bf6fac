"""The JSON text of every event, and the launch -> GPU flow arrows, as rows of ``tl_rows``.

Each row is one unit that must stay in one file: a slice, an instant, a counter sample, or a flow
(its start and finish events together). ``anchor_ns`` decides which part of a split timeline the
row goes to: GPU work and its flow go where the API call that launched it goes, so every arrow
finds both of its ends in the same file.
"""

from __future__ import annotations

import duckdb

from .events import GPU_KINDS


def build_lines(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``tl_rows(anchor_ns, nev, nbytes, line)`` from ``tl_ev`` (numbered tracks)."""
    gpu = ", ".join(f"'{k}'" for k in GPU_KINDS)
    # the launching call of each GPU row: the first API call with its correlation id on its rank
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_launch AS
        SELECT g.rid AS gpu_rid, a.rid AS api_rid, a.pid AS api_pid, a.tid AS api_tid, a.start_ns AS api_start
        FROM tl_ev g JOIN (
            SELECT rank, corr, arg_min(rid, start_ns) AS rid, arg_min(pid, start_ns) AS pid,
                   arg_min(tid, start_ns) AS tid, min(start_ns) AS start_ns
            FROM tl_ev WHERE kind = 'api' AND corr IS NOT NULL GROUP BY rank, corr) a
          ON a.rank = g.rank AND a.corr = g.corr
        WHERE g.kind IN ({gpu})""")
    event = """CASE ph
        WHEN 'X' THEN '{"ph":"X","cat":' || to_json(cat)::VARCHAR || ',"name":' || name_json
             || ',"pid":' || pid || ',"tid":' || tid || ',"ts":' || tl_us(start_ns)
             || ',"dur":' || tl_dur(end_ns - start_ns) || ',"args":' || args || '}'
        WHEN 'i' THEN '{"ph":"i","s":"t","cat":' || to_json(cat)::VARCHAR || ',"name":' || name_json
             || ',"pid":' || pid || ',"tid":' || tid || ',"ts":' || tl_us(start_ns) || ',"args":' || args || '}'
        WHEN 'C' THEN '{"ph":"C","name":' || name_json || ',"pid":' || pid || ',"tid":0,"ts":'
             || tl_us(start_ns) || ',"args":' || args || '}'
        END"""
    # a flow's "s" binds to the slice enclosing it on the API thread (the call, which starts at the
    # same time), its "f" with bp "e" to the GPU slice enclosing its time (the kernel itself)
    flow = """'{"ph":"s","cat":"ac2g","name":"launch","id":' || f.fid || ',"pid":' || f.api_pid
        || ',"tid":' || f.api_tid || ',"ts":' || tl_us(f.api_start) || '},' || chr(10)
        || '{"ph":"f","bp":"e","cat":"ac2g","name":"launch","id":' || f.fid || ',"pid":' || g.pid
        || ',"tid":' || g.tid || ',"ts":' || tl_us(g.start_ns) || '}'"""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_rows AS
        WITH f AS (SELECT row_number() OVER (ORDER BY gpu_rid) AS fid, * FROM tl_launch),
        r AS (
            SELECT coalesce(l.api_start, e.start_ns) AS anchor_ns, e.rid AS ord, 1 AS nev, {event} AS line
            FROM tl_ev e LEFT JOIN tl_launch l ON l.gpu_rid = e.rid
            UNION ALL
            SELECT f.api_start AS anchor_ns, g.rid AS ord, 2 AS nev, {flow} AS line
            FROM f JOIN tl_ev g ON g.rid = f.gpu_rid)
        SELECT anchor_ns, ord, nev, strlen(line) AS nbytes, line FROM r""")
