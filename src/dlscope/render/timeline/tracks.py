"""Placing events on tracks: processes (one per rank's host, one per rank's GPU), threads (one per
layer and OS thread, one per CUDA stream), and overflow lanes for slices that do not nest.

The Chrome trace format requires the slices of one thread to nest; Perfetto drops a slice that
overlaps its neighbour without nesting in it. Such overlaps are real: with programmatic dependent
launch a kernel starts a fraction of a microsecond before the previous one on its stream ends.
Rather than bend times, a slice that crosses its enclosing slice moves to an overflow lane (a
sibling track named "... overlap 1"), and so do its children; this repeats until every lane nests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import duckdb

from ...store.build import nesting_sql
from .events import LAYER_COUNTER, LAYER_NAMES, LAYER_STREAM

MAX_LANE_ROUNDS = 16


def assign_lanes(con: duckdb.DuckDBPyConnection) -> int:
    """Number the track of every row of ``tl_ev`` (``trk``) and move slices that break nesting to
    overflow lanes. Returns the number of slices moved."""
    con.execute("""CREATE OR REPLACE TEMP TABLE tl_ev AS
        SELECT *, dense_rank() OVER (ORDER BY rank, dev, layer, opid, otid, stream) AS trk FROM tl_ev""")
    moved = 0
    only = "TRUE"
    for _ in range(MAX_LANE_ROUNDS):
        src = f"(SELECT rid, trk, lane, start_ns, end_ns FROM tl_ev WHERE ph = 'X' AND {only})"
        con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_cross AS
            SELECT n.rid FROM ({nesting_sql(src, "trk, lane")}) n
            JOIN tl_ev c ON c.rid = n.rid JOIN tl_ev p ON p.rid = n.parent_rid
            WHERE c.end_ns > p.end_ns""")
        n = con.execute("SELECT count(*) FROM tl_cross").fetchall()[0][0]
        if not n:
            break
        moved += n
        con.execute("UPDATE tl_ev SET lane = lane + 1 WHERE rid IN (SELECT rid FROM tl_cross)")
        # only tracks that changed can break nesting in the next round
        only = "trk IN (SELECT DISTINCT trk FROM tl_ev WHERE rid IN (SELECT rid FROM tl_cross))"
    return moved


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


def number_tracks(con: duckdb.DuckDBPyConnection, device_names: dict[tuple[int, int], str]
                  ) -> tuple[list[Process], list[Track]]:
    """Give every row of ``tl_ev`` its ``pid`` and ``tid`` and return the processes and threads to
    name. Processes: per rank, the host first, then each GPU. Threads: by layer (application
    first), then OS thread or stream, then lane."""
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_ev AS
        SELECT e.*, dense_rank() OVER (ORDER BY rank, dev = -1 DESC, dev) AS pid,
               CASE WHEN layer = {LAYER_COUNTER} THEN 0
                    ELSE dense_rank() OVER (PARTITION BY rank, dev ORDER BY layer, opid, otid, stream, lane) END AS tid
        FROM tl_ev e""")
    procs = []
    for pid, rank, dev in con.execute("SELECT DISTINCT pid, rank, dev FROM tl_ev ORDER BY pid").fetchall():
        if dev == -1:
            name = f"rank {rank} host"
        elif dev == -2:
            name = f"rank {rank} GPU (unknown device)"
        else:
            label = device_names.get((rank, dev))
            name = f"rank {rank} GPU {dev}" + (f" ({label})" if label else "")
        procs.append(Process(pid, name, pid))
    multi_pid = {r for (r,) in con.execute(
        "SELECT rank FROM tl_ev WHERE opid <> -1 GROUP BY rank HAVING count(DISTINCT opid) > 1").fetchall()}
    tracks = []
    for pid, tid, rank, layer, opid, otid, stream, lane in con.execute(f"""
            SELECT DISTINCT pid, tid, rank, layer, opid, otid, stream, lane FROM tl_ev
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
        out.append({"name": "thread_sort_index", "ph": "M", "pid": t.pid, "tid": t.tid,
                    "args": {"sort_index": t.sort}})
    return [json.dumps(e, separators=(",", ":")) for e in out]
