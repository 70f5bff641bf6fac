"""The timeline: a profile as a Chrome trace (JSON, optionally gzipped) that Perfetto UI and
chrome://tracing open, with every layer on its own tracks.

One process per rank's host ("rank 0 host": steps, then phases, ops, CUDA API calls and syncs,
one track per OS thread each) and one per rank's GPU ("rank 0 GPU 0": one track per stream with
its kernels, copies and sets, plus the GPU's counters); a flow arrow from each launching API call
to its GPU work. Events are made in DuckDB SQL and written in bulk; nothing per event is a Python
object. A timeline too large to open (Perfetto and Chrome struggle past ~1M events or 256 MB of
JSON) is written in parts, cut at step boundaries where possible; ``max_events`` keeps only the
beginning and ``window`` only some steps.

Timestamps are microseconds with three decimals (exact nanoseconds) since
``baseTimeNanoseconds``, as Kineto writes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ...analysis.core.context import ProfileData
from ...errors import UsageError
from ...store import db
from ..progress import ProgressCallback
from .events import StepWindow, define_macros, sources
from .lines import count_sql, rows_sql
from .parts import keep_first, part_starts
from .tracks import metadata_events, place, track_names
from .writer import SEPARATOR, TAIL, TooLarge, header_bytes, write_file

__all__ = ["StepWindow", "TimelineOptions", "TimelineResult", "export_timeline", "part_paths"]

PART_EVENTS = 1_000_000
PART_BYTES = 256_000_000
SUFFIXES = (".json.gz", ".json")


@dataclass
class TimelineOptions:
    window: StepWindow | None = None
    max_events: int | None = None
    part_events: int = PART_EVENTS
    part_bytes: int = PART_BYTES
    progress: ProgressCallback | None = None


@dataclass
class TimelineResult:
    files: list[Path]
    events: int  # trace events written (all parts, metadata events not counted)
    total_events: int  # events the selection holds before --max-events
    bytes: int  # uncompressed JSON, all parts
    flows: int
    overlap_moved: int  # slices moved to overflow lanes because they did not nest
    cut_at_s: float | None = None  # --max-events: seconds into the timeline where it stops
    notes: list[str] = field(default_factory=list)


def split_suffix(path: Path) -> tuple[str, str]:
    for s in SUFFIXES:
        if path.name.endswith(s):
            return path.name[: -len(s)], s
    raise UsageError(f"{path}: a timeline is written as .json or .json.gz")


def part_paths(out: Path, n: int) -> list[Path]:
    """``trace.json.gz`` -> ``trace.part1.json.gz`` ... when there are several parts."""
    if n == 1:
        return [out]
    stem, suffix = split_suffix(out)
    return [out.with_name(f"{stem}.part{i}{suffix}") for i in range(1, n + 1)]


def _check_window(data: ProfileData, window: StepWindow) -> None:
    steps = data.con.execute("SELECT min(step), max(step), count(*) FROM steps").fetchall()[0]
    if not steps[2]:
        raise UsageError(f"{data.path}: the profile has no steps, so --steps cannot select any")
    n = data.scalar(f"SELECT count(*) FROM steps WHERE {window.sql()}")
    if not n:
        raise UsageError(f"--steps selects no step of {data.path} (it has steps {steps[0]} to {steps[1]})")


def _base_ns(data: ProfileData) -> int:
    """The whole second at or before the first event: timestamps count from there."""
    t0 = data.scalar("""SELECT min(t) FROM (
        SELECT min(start_ns) t FROM raw_phases UNION ALL SELECT min(start_ns) FROM raw_steps UNION ALL
        SELECT min(start_ns) FROM raw_ops UNION ALL SELECT min(start_ns) FROM raw_api UNION ALL
        SELECT min(start_ns) FROM raw_sync UNION ALL SELECT min(start_ns) FROM raw_kernels UNION ALL
        SELECT min(start_ns) FROM raw_memcpy UNION ALL SELECT min(start_ns) FROM raw_memset UNION ALL
        SELECT min(ts_ns) FROM raw_counters)""")
    return (int(t0) // 1_000_000_000) * 1_000_000_000 if t0 is not None else 0


def _windows(starts: list[int], anchors: np.ndarray) -> list[str]:
    """SQL conditions on ``anchor_ns`` selecting the rows of each part (rows ``anchors[:len]`` kept)."""
    if not len(anchors):
        return ["FALSE"]
    bounds = [int(anchors[s]) for s in starts[1:]]
    lows = [None, *bounds]
    highs = [*bounds, None]
    last = int(anchors[-1])
    return [
        " AND ".join(
            [
                f"anchor_ns >= {lo}" if lo is not None else "TRUE",
                f"anchor_ns < {hi}" if hi is not None else f"anchor_ns <= {last}",
            ]
        )
        for lo, hi in zip(lows, highs)
    ]


def export_timeline(data: ProfileData, out: Path, options: TimelineOptions | None = None) -> TimelineResult:
    """Write the timeline of ``data`` to ``out`` (.json or .json.gz), in parts when it is large."""
    opt = options or TimelineOptions()
    progress = opt.progress or (lambda what, frac: None)
    split_suffix(out)
    if opt.window:
        _check_window(data, opt.window)
    con = data.con
    progress("timeline: reading events", 0.0)
    base_ns = _base_ns(data)
    define_macros(con, base_ns)
    # tables without rows are left out (smaller queries to plan), but for the steps: every query
    # then has at least one kind of slice to read
    counts = data.meta.table_rows
    srcs = [
        s
        for s in sources(opt.window)
        if s.kind == "step" or (counts[s.table] > 0 if s.table in counts else data.has(s.table))
    ]
    progress("timeline: placing tracks", 0.1)
    moved = place(con, srcs)
    devices = {
        (int(d.get("rank", 0) or 0), int(d["index"])): str(d.get("name") or "")
        for d in data.meta.devices
        if isinstance(d.get("index"), int)
    }
    meta_lines = metadata_events(*track_names(con, devices))
    progress("timeline: making events", 0.2)
    rows = rows_sql(con, srcs, moved > 0)
    # at most this many rows and events, by the files' row counts (each GPU row may carry its flow's
    # two events): below the limits the rows are not counted first (a pass over every table, 20-30 ms
    # on 450k events), the file's writer counts them as it goes
    stored = data.stored.rows
    most_rows = sum(int(stored.get(s.table, 0)) for s in srcs)
    most_events = most_rows + 2 * sum(int(stored.get(s.table, 0)) for s in srcs if s.gpu)
    # each part repeats the header and the metadata events: the limits hold them too
    header = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "traceName": str(data.path),
        "deviceProperties": _device_properties(data),
    }
    fixed_bytes = (
        len(header_bytes({**header, "dlscope": {"profile": str(data.path), "part": 10**6, "parts": 10**6}}))
        + len(TAIL)
        + sum(len(m.encode()) + len(SEPARATOR) for m in meta_lines)
    )
    ev_cap, byte_cap = opt.part_events - len(meta_lines), opt.part_bytes - fixed_bytes
    if ev_cap <= 0 or byte_cap <= 0:
        raise UsageError("the part limits are smaller than the metadata of the timeline")
    done = 0

    def on_rows(n: int) -> None:
        nonlocal done
        done += n
        progress("timeline: writing", 0.3 + 0.7 * min(done / max(most_rows, 1), 1.0))

    def meta_of(part: int, parts: int) -> dict[str, Any]:
        return {**header, "dlscope": {"profile": str(data.path), "part": part, "parts": parts}}

    def rows_of(cond: str) -> pa.RecordBatchReader:
        # rows begin with the separator: the metadata events (at least one per process) come first
        return db.arrow_batches(con, f"SELECT line, nev FROM ({rows}) WHERE {cond}")

    res = TimelineResult([out], 0, 0, 0, 0, moved)
    # one file, written as its rows are made, unless the events (known at most, or counted) or
    # (found on the way) the bytes are too many for one: then the rows are sized first and cut
    # into parts
    event_cap = min(ev_cap, opt.max_events) if opt.max_events is not None else ev_cap
    if most_events > event_cap:
        res.total_events = int(con.execute(count_sql(srcs)).fetchall()[0][1])
    if most_events <= event_cap or res.total_events <= event_cap:
        reader = rows_of("TRUE")
        try:
            written = write_file(out, meta_of(1, 1), meta_lines, reader, on_rows, byte_cap, event_cap)
            res.bytes, res.events, res.flows = written.bytes, written.events, written.flows
            res.total_events = written.events
        except TooLarge:
            reader.close()  # the connection takes no other query while a result streams
            done = 0
            _write_parts(con, rows, out, opt, res, meta_lines, meta_of, rows_of, on_rows, ev_cap, byte_cap)
    else:
        _write_parts(con, rows, out, opt, res, meta_lines, meta_of, rows_of, on_rows, ev_cap, byte_cap)
    progress("timeline: done", 1.0)
    if res.cut_at_s is not None:
        res.notes.append(
            f"kept the first {res.events:,} of {res.total_events:,} events "
            f"(the first {res.cut_at_s:.3f} s); use --steps or a larger --max-events for more"
        )
    if moved:
        res.notes.append(
            f"{moved:,} slices that overlap their neighbours without nesting (e.g. kernels "
            "started by programmatic dependent launch) are on 'overlap' tracks"
        )
    return res


def _write_parts(
    con: duckdb.DuckDBPyConnection,
    rows: str,
    out: Path,
    opt: TimelineOptions,
    res: TimelineResult,
    meta_lines: list[str],
    meta_of: Callable[[int, int], dict[str, Any]],
    rows_of: Callable[[str], pa.RecordBatchReader],
    on_rows: Callable[[int], None],
    ev_cap: int,
    byte_cap: int,
) -> None:
    """Size every row, keep the first ``opt.max_events`` events and write the rest in parts under
    the limits, filling ``res``."""
    sized = db.query_arrow(con, f"SELECT anchor_ns, nev, strlen(line) AS nbytes FROM ({rows}) ORDER BY anchor_ns")
    anchors = sized.column("anchor_ns").to_numpy()
    nev = sized.column("nev").to_numpy()
    nbytes = sized.column("nbytes").to_numpy()
    res.total_events = int(nev.sum())
    if opt.max_events is not None and opt.max_events < res.total_events:
        keep = keep_first(anchors, nev, opt.max_events)
        res.cut_at_s = (int(anchors[keep]) - int(anchors[0])) / 1e9
        anchors, nev, nbytes = anchors[:keep], nev[:keep], nbytes[:keep]
    res.events, res.flows = int(nev.sum()), int((nev == 3).sum())
    steps = np.sort(np.array([r[0] for r in con.execute("SELECT start_ns FROM steps").fetchall()], dtype=np.int64))
    windows = _windows(part_starts(anchors, nev, nbytes, ev_cap, byte_cap, steps), anchors)
    res.files = part_paths(out, len(windows))
    res.bytes = sum(
        write_file(path, meta_of(k + 1, len(windows)), meta_lines, rows_of(cond), on_rows).bytes
        for k, (path, cond) in enumerate(zip(res.files, windows))
    )


def _device_properties(data: ProfileData) -> list[dict[str, object]]:
    """meta.devices in Kineto's ``deviceProperties`` shape (read back by the importer)."""
    out = []
    for d in data.meta.devices:
        p: dict[str, object] = {"id": d.get("index"), "name": d.get("name")}
        if d.get("sms"):
            p["numSms"] = d["sms"]
        if d.get("memory_bytes"):
            p["totalGlobalMem"] = d["memory_bytes"]
        cc = str(d.get("compute_capability") or "")
        if "." in cc:
            major, minor = cc.split(".", 1)
            if major.isdigit() and minor.isdigit():
                p["computeMajor"], p["computeMinor"] = int(major), int(minor)
        out.append(p)
    return out
