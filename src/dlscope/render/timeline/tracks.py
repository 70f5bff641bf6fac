"""Placing events on tracks: processes (one per rank's host, one per rank's GPU) and threads (one
per layer and OS thread, one per CUDA stream, plus the overflow lanes of lanes.py).

Tracks are few (tens), events many: tracks are found and numbered in small tables (``tl_keys``,
``tl_tracks``) that the events join, never by ranking the events themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from .events import LAYER_COUNTER, LAYER_NAMES, LAYER_STREAM, TRACK_KEYS, Source
from .lanes import assign_lanes

_KEYS = ", ".join(TRACK_KEYS)


@dataclass
class Track:
    pid: int
    tid: int
    name: str
    sort: int


@dataclass
class Process:
    pid: int
    name: str
    sort: int


def slices_sql(sources: list[Source]) -> str:
    """SQL of every slice (ph X) with its track before lanes: columns trk, start_ns, end_ns."""
    parts = [
        f"SELECT {s.keys_sql()}, {s.start} AS start_ns, {s.end} AS end_ns {s.from_sql(names=False)}"
        for s in sources
        if s.ph == "X"
    ]
    return f"""SELECT k.trk, e.start_ns, e.end_ns FROM ({" UNION ALL ".join(parts)}) e
        JOIN tl_keys k USING ({_KEYS})"""


def place(con: duckdb.DuckDBPyConnection, sources: list[Source]) -> int:
    """Create ``tl_keys`` (one row per track before lanes: TRACK_KEYS and ``trk``), ``tl_moved``
    (slices moved to overflow lanes) and ``tl_tracks`` (every track with its ``pid`` and ``tid``),
    both with ``pt``, the JSON text of pid and tid that the events of the track carry. Processes:
    per rank, the host first, then each GPU. Threads: by layer (application first), then OS thread
    or stream, then lane. Returns the number of slices moved."""
    keys = " UNION ".join(f"SELECT DISTINCT {s.keys_sql()} {s.from_sql(names=False)}" for s in sources)
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_keys AS
        SELECT row_number() OVER (ORDER BY {_KEYS}) AS trk, * FROM ({keys})""")
    moved = assign_lanes(con, slices_sql(sources))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_tracks AS
        SELECT *, ',"pid":' || pid || ',"tid":' || tid || ',"ts":' AS pt FROM (
            SELECT k.*, l.lane, dense_rank() OVER (ORDER BY rank, dev = -1 DESC, dev) AS pid,
                   CASE WHEN layer = {LAYER_COUNTER} THEN 0 ELSE dense_rank() OVER (
                       PARTITION BY rank, dev ORDER BY layer, opid, otid, stream, lane) END AS tid
            FROM tl_keys k JOIN (SELECT trk, 0 AS lane FROM tl_keys UNION SELECT DISTINCT trk, lane FROM tl_moved) l
              USING (trk))""")
    con.execute("""CREATE OR REPLACE TEMP TABLE tl_moved AS
        SELECT m.trk, m.start_ns, m.end_ns, t.pt FROM tl_moved m JOIN tl_tracks t USING (trk, lane)""")
    return moved


def track_names(
    con: duckdb.DuckDBPyConnection, device_names: dict[tuple[int, int], str]
) -> tuple[list[Process], list[Track]]:
    """The processes and threads of ``tl_tracks``, named."""
    procs = []
    for pid, rank, dev in con.execute("SELECT DISTINCT pid, rank, dev FROM tl_tracks ORDER BY pid").fetchall():
        if dev == -1:
            name = f"rank {rank} host"
        elif dev == -2:
            name = f"rank {rank} GPU (unknown device)"
        else:
            label = device_names.get((rank, dev))
            name = f"rank {rank} GPU {dev}" + (f" ({label})" if label else "")
        procs.append(Process(pid, name, pid))
    multi_pid = {
        r
        for (r,) in con.execute(
            "SELECT rank FROM tl_tracks WHERE opid <> -1 GROUP BY rank HAVING count(DISTINCT opid) > 1"
        ).fetchall()
    }
    tracks = []
    for pid, tid, rank, layer, opid, otid, stream, lane in con.execute(f"""
            SELECT pid, tid, rank, layer, opid, otid, stream, lane FROM tl_tracks
            WHERE layer <> {LAYER_COUNTER} ORDER BY pid, tid""").fetchall():
        if layer == LAYER_STREAM:
            name = f"stream {stream}" if stream != -1 else "stream (unknown)"
        else:
            name = LAYER_NAMES[layer]
            if otid != -1:
                name += f" (pid {opid} thread {otid})" if rank in multi_pid else f" (thread {otid})"
        if lane:
            name += f" overlap {lane}"
        tracks.append(Track(pid, tid, name, tid))
    return procs, tracks


def metadata_events(procs: list[Process], tracks: list[Track]) -> list[str]:
    """The ``M`` events naming and ordering processes and threads, as JSON text."""
    out: list[dict[str, Any]] = []
    for p in procs:
        out.append({"name": "process_name", "ph": "M", "pid": p.pid, "tid": 0, "args": {"name": p.name}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": p.pid, "tid": 0, "args": {"sort_index": p.sort}})
    for t in tracks:
        out.append({"name": "thread_name", "ph": "M", "pid": t.pid, "tid": t.tid, "args": {"name": t.name}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": t.pid, "tid": t.tid, "args": {"sort_index": t.sort}})
    return [json.dumps(e, separators=(",", ":")) for e in out]
