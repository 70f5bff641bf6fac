"""Import PyTorch profiler (Kineto) traces and other Chrome-trace JSON.

Reads what ``export_chrome_trace`` and ``tensorboard_trace_handler`` write (also gzipped, also
several ranks at once) and the older, ROCm, MTIA and CPU-only dialects found in the wild. Events
are parsed by DuckDB in C++ (see :mod:`.trace_json`) and split into the profile's tables with
one SQL query each; no Python object is made per event.

Timestamps are microseconds, relative to ``baseTimeNanoseconds`` when the trace has it (else
since the Unix epoch). They are read as text and converted to integer nanoseconds exactly
(a double cannot hold epoch microseconds to the nanosecond).
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ..errors import InputError
from ..store import db
from ..store.build import ProfileBuilder, key_node_steps_sql
from ..store.meta import CollectorStatus, Meta
from ..store.schema import MAX_TIME_NS
from .base import Importer, ImportOptions
from .comms import comms_sql
from .parallel_parse import create_in_order
from .torch_phases import TORCH_AUTO_DOMAIN, TORCH_AUTO_PATTERN, derive_torch_phases
from .trace_json import CarvedTrace, carve

# args read from each event. Numbers are parsed as numbers (fast); a trace whose values do not
# fit (a string where a number is expected) is re-read with every field as text and cast (slow,
# tolerant). Key spellings differ in case between Kineto versions and DuckDB struct keys are
# case-insensitive, so the legacy spelling is read with its own spec.
# (Columns stored as 32-bit integers are read as such: the event table is the import's largest
# allocation, and DuckDB spills to disk past its memory cap.)
_ARGS_TYPED = """
    "External id" BIGINT, correlation BIGINT, cbid INTEGER, device INTEGER, stream BIGINT,
    "registers per thread" INTEGER, "shared memory" BIGINT, grid INTEGER[], block INTEGER[], bytes BIGINT,
    size BIGINT, direction VARCHAR, "Sequence number" BIGINT, "Fwd thread id" BIGINT,
    "Input Dims" VARCHAR, "Input type" VARCHAR, "Concrete Inputs" VARCHAR, "Record function id" BIGINT,
    cuda_sync_kind VARCHAR,
    "Device Id" INTEGER, "Device Type" INTEGER, "Total Allocated" BIGINT, "Total Reserved" BIGINT,
    "Collective name" VARCHAR, "In msg nelems" BIGINT, "Out msg nelems" BIGINT, "Group size" BIGINT,
    dtype VARCHAR, "Process Group Name" VARCHAR, "Process Group Ranks" VARCHAR"""
_ARGS_TEXT = """
    "External id" VARCHAR, correlation VARCHAR, cbid VARCHAR, device VARCHAR, stream VARCHAR,
    "registers per thread" VARCHAR, "shared memory" VARCHAR, grid JSON, block JSON, bytes VARCHAR,
    size VARCHAR, direction VARCHAR, "Sequence number" VARCHAR, "Fwd thread id" VARCHAR,
    "Input Dims" VARCHAR, "Input type" VARCHAR, "Concrete Inputs" VARCHAR, "Record function id" VARCHAR,
    cuda_sync_kind VARCHAR,
    "Device Id" VARCHAR, "Device Type" VARCHAR, "Total Allocated" VARCHAR, "Total Reserved" VARCHAR,
    "Collective name" VARCHAR, "In msg nelems" VARCHAR, "Out msg nelems" VARCHAR, "Group size" VARCHAR,
    dtype VARCHAR, "Process Group Name" VARCHAR, "Process Group Ranks" VARCHAR"""

TRACE_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

API_CATS = ("cuda_runtime", "cuda_driver", "runtime", "driver", "mtia_runtime", "hip_runtime")
KERNEL_CATS = ("kernel", "mtia_ccp_events")
MEMCPY_CATS = ("gpu_memcpy", "memcpy")
MEMSET_CATS = ("gpu_memset", "memset")
OP_CATS = ("cpu_op", "operator")
ANNOTATION_CATS = ("user_annotation",)
# categories read on purpose elsewhere or deliberately left out (flows are rebuilt from ids)
KNOWN_SKIPPED = (
    "ac2g",
    "fwdbwd",
    "async_gpu",
    "async_cpu_to_gpu",
    "critical_path",
    "trace",
    "gpu_user_annotation",
    "cuda_profiler_range",
    "python_function",
    "overhead",
)


def _ns(col: str) -> str:
    """SQL: a JSON number read as text (microseconds) -> exact integer nanoseconds. Digits past
    the third decimal are dropped; exponent notation (never written by Kineto) goes through a
    double. CASE, not coalesce: the fallback must not be computed for every row. Kineto writes
    exactly three decimals: that case is tested first and is one cast (0.2 s less on 500k events)."""
    dot = f"strpos({col}, '.')"
    return f"""(CASE WHEN {dot} > 0 AND length({col}) - {dot} = 3
        AND NOT contains({col}, 'e') AND NOT contains({col}, 'E')
             THEN TRY_CAST(replace({col}, '.', '') AS BIGINT)
        WHEN {col} LIKE '%e%' OR {col} LIKE '%E%' THEN round(TRY_CAST({col} AS DOUBLE) * 1000)::BIGINT
        WHEN {dot} = 0 THEN TRY_CAST({col} AS BIGINT) * 1000
        ELSE TRY_CAST(replace(left({col}, {dot} + 3), '.', '') AS BIGINT)
             * (CASE length({col}) - {dot} WHEN 1 THEN 100 WHEN 2 THEN 10 ELSE 1 END) END)"""


def _int(expr: str) -> str:
    return f"TRY_CAST({expr} AS BIGINT)"


def _rank_of(path: Path, metadata: dict[str, Any]) -> int | None:
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"])
    if isinstance(info, str):  # some writers store a Python repr
        m = re.search(r"['\"]rank['\"]\s*:\s*(\d+)", info)
        if m:
            return int(m.group(1))
    m = re.search(r"rank[-_]?(\d+)", path.name, re.IGNORECASE)
    return int(m.group(1)) if m else None


def _world_size(metadata: dict[str, Any]) -> int | None:
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("world_size"), int):
        return int(info["world_size"])
    return None


def _devices(metadata: dict[str, Any], rank: int) -> list[dict[str, Any]]:
    props = metadata.get("deviceProperties")
    out = []
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict):
                cc = f"{p.get('computeMajor')}.{p.get('computeMinor')}" if "computeMajor" in p else None
                out.append(
                    {
                        "rank": rank,
                        "index": p.get("id"),
                        "name": p.get("name"),
                        "sms": p.get("numSms"),
                        "memory_bytes": p.get("totalGlobalMem"),
                        "compute_capability": cc,
                    }
                )
    return out


class KinetoImporter(Importer):
    name = "kineto"
    description = "PyTorch profiler / Kineto and Chrome trace JSON (.json, .json.gz, tensorboard_trace_handler folders)"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        if text[:1] == b"{":
            return b'"traceEvents"' in head or (b'"ph"' in head[:4096] and b'"nodes"' not in head[:4096])
        return text[:1] == b"[" and text[1:].lstrip()[:1] == b"{"

    def expand_dir(self, directory: Path) -> list[Path]:
        # a JAX profile folder holds the same events as JSON beside its XSpace: the XSpace is read
        return sorted(
            p
            for p in directory.rglob("*")
            if p.is_file()
            and p.name.endswith(TRACE_SUFFIXES)
            and not p.name.endswith(".et.json")
            and "_et." not in p.name
            and not any(p.parent.glob("*.xplane.pb"))
        )

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        op_base = 0
        for i, path in enumerate(files):
            op_base = load_trace(path, options, builder, meta, op_base, _share(options, path, i, len(files)))


@dataclass
class TraceTables:
    """One trace file read into relations (tables in a DuckDB connection) by table name, text
    name columns, with the file's metadata."""

    tables: dict[str, list[str]]
    metadata: dict[str, Any]
    skipped: list[tuple[str, int]]
    rank: int
    counts: dict[str, int]
    backing: list[str]  # tables the relations are views of: drop them once the relations are used
    dropped: int = 0  # events left out as malformed (no readable start time)


def _share(options: ImportOptions, path: Path, i: int, n: int) -> Callable[[str, float], None] | None:
    """File ``i`` of ``n``'s part of the import's progress: reading all files is the first 80%
    (the builder's linking and writing the rest)."""
    report = options.progress
    if report is None:
        return None
    return lambda what, f: report(f"{what} {path.name}", 0.8 * (i + f) / n)


def read_trace(
    path: Path,
    con: duckdb.DuckDBPyConnection,
    prefix: str,
    rank: int | None = None,
    op_base: int = 0,
    key_node: str | None = None,
    with_steps: bool = True,
    timings: dict[str, float] | None = None,
    progress: Callable[[str, float], None] | None = None,
) -> TraceTables:
    """Read one Kineto/Chrome trace file into tables of ``con`` named ``<prefix><table>``.
    ``with_steps=False`` leaves iterations to the caller (dlscope's own recording defines them).
    Stage durations are added to ``timings``; ``progress(what, fraction)`` hears how far it got."""
    say = progress or (lambda what, f: None)
    timings = timings if timings is not None else {}
    clock = time.perf_counter

    def timed(stage: str, t: float) -> None:
        timings[stage] = timings.get(stage, 0.0) + clock() - t

    work = Path(tempfile.mkdtemp(prefix="dlscope-import-"))
    ev = f"{prefix}ev"
    try:
        t = clock()
        carved = carve(path, work, progress=lambda f: say("reading", 0.4 * f), parts=db.threads(con))
        timed("carve", t)
        say("parsing", 0.4)
        t = clock()
        md = carved.metadata
        _check_base(path, md)
        if rank is None:
            rank = _rank_of(path, md)
        try:
            try:
                parts = _read_events(con, ev, carved, md)
            except duckdb.Error:
                if len(carved.event_files) == 1:
                    raise
                # a cut between parts fell inside an event (a "}, {" in a name or a nested
                # value), or the events are corrupt: read the array as one file to tell
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir()
                parts = _read_events(con, ev, carve(path, work), md)
        except duckdb.Error as e:
            msg = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
            raise InputError(f"{path}: corrupt trace events ({msg[:200]})") from None
        dropped = _drop_untimed(con, parts or [ev])
        timed("parse", t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say("splitting", 0.8)
    t = clock()
    rels, skipped = _split(con, ev, prefix, rank if rank is not None else 0, op_base, _world_size(md))
    timed("split", t)
    t = clock()
    tables = {name: [rel] for name, rel in rels.items()}
    derived = derive_torch_phases(con, rels["ops"], rels["phases"], rels["steps"], f"{prefix}derived")
    if derived is not None:
        tables["phases"].append(derived)
    if not with_steps:
        tables.pop("steps")
    elif key_node:
        tables["steps"] = [key_node_steps(con, rels, key_node, rank or 0, f"{prefix}kn_steps")]
    elif not _count(con, rels["steps"]):
        tables["steps"] = [optimizer_steps(con, rels, rank or 0, f"{prefix}opt_steps")]
    counts = {name: sum(_count(con, r) for r in rs) for name, rs in tables.items()}
    timed("derive", t)
    # the views read {ev} and {prefix}launch: whoever consumes them drops these afterwards
    return TraceTables(
        tables, md, skipped, -1 if rank is None else rank, counts, [ev, *parts, f"{prefix}launch"], dropped
    )


def _drop_untimed(con: duckdb.DuckDBPyConnection, tables: list[str]) -> int:
    """Delete the events whose start time is missing or unreadable (no ``ts``, a ``ts`` that is
    not a number); returns how many. Every table and report assumes an event has a start."""
    dropped = 0
    for table in tables:
        n = _count(con, f"{table} WHERE start_ns IS NULL")
        if n:
            con.execute(f"DELETE FROM {table} WHERE start_ns IS NULL")
            dropped += n
    return dropped


def _count(con: duckdb.DuckDBPyConnection, relation: str) -> int:
    return int(con.execute(f"SELECT count(*) FROM {relation}").fetchall()[0][0])


def load_trace(
    path: Path,
    options: ImportOptions,
    builder: ProfileBuilder,
    meta: Meta,
    op_base: int = 0,
    progress: Callable[[str, float], None] | None = None,
) -> int:
    """Import one trace file into ``builder``; returns the next free op id."""
    timings: dict[str, float] = {}
    tt = read_trace(
        path,
        builder.con,
        f"f{op_base}_{abs(hash(str(path))) % 10**8}_",
        options.rank,
        op_base,
        options.key_node,
        timings=timings,
        progress=progress,
    )
    for stage, secs in timings.items():
        meta.timed(f"import.{stage}", secs)
    if tt.rank < 0:  # the tables were written with rank 0
        meta.note(f"{path.name}: no rank in the trace or its name; using rank 0")
        tt.rank = 0
    steps = tt.tables.get("steps", [])
    if (
        steps
        and tt.counts.get("steps")
        and builder.con.execute(f"SELECT any_value(source) FROM {steps[0]}").fetchall()[0][0] == "optimizer"
    ):
        meta.note(f"{path.name}: no ProfilerStep#N ranges; iterations end at each optimizer step")
    for name, rels in tt.tables.items():
        for rel in rels:
            builder.add_relation(name, rel)
    builder.drop_after_prepare(tt.backing)
    _fill_meta(meta, path, tt.metadata, tt.rank, tt.counts, tt.skipped)
    if tt.dropped:
        meta.note(f"{path.name}: {tt.dropped} malformed event(s) not imported (no readable start time 'ts')")
    return op_base + tt.counts.get("ops", 0)


def _is_legacy(events: list[Path]) -> bool:
    """Old Kineto wrote ``"external id"``; newer writes ``"External id"``."""
    with open(events[0], "rb") as f:
        head = f.read(1 << 20)
    return b'"external id"' in head and b'"External id"' not in head


def _check_base(path: Path, md: dict[str, Any]) -> None:
    """Refuse a ``baseTimeNanoseconds`` that no stored time can hold (a damaged trace's 1e300 or
    inf): every event's time would be past it, and the import failed converting them to int64
    (ConversionException, exit 1). A base that is not a number is ignored, as before."""
    base = md.get("baseTimeNanoseconds")
    try:
        base_ns = int(base) if base is not None else 0
    except (TypeError, ValueError):
        return
    except OverflowError:  # inf
        base_ns = MAX_TIME_NS + 1
    if abs(base_ns) > MAX_TIME_NS:
        raise InputError(f"{path}: baseTimeNanoseconds {base!r} is out of range (not a time in nanoseconds)")


def _read_events(con: duckdb.DuckDBPyConnection, ev: str, carved: CarvedTrace, md: dict[str, Any]) -> list[str]:
    """Create the event table ``ev``; returns the tables behind it (see parallel_parse)."""
    base = md.get("baseTimeNanoseconds")
    try:
        base_ns = int(base) if base is not None else 0
    except (TypeError, ValueError):
        base_ns = 0
    legacy = _is_legacy(carved.event_files)
    for typed in (True, False):
        try:
            return create_in_order(  # the lambda runs within this iteration: typed is this loop's
                con,
                ev,
                carved.event_files,
                lambda files: _events_select(files, base_ns, legacy, typed),  # noqa: B023
            )
        except duckdb.Error:  # a value of an unexpected type somewhere: read everything as text
            if not typed:
                raise
    raise AssertionError("unreachable")


def _events_select(events: list[Path], base_ns: int, legacy: bool, typed: bool) -> str:
    """The query reading the event files into the normalized event columns."""
    fields = _ARGS_TYPED if typed else _ARGS_TEXT
    if legacy:
        fields = fields.replace('"External id"', '"external id"')
    cols = (
        "{ph: 'VARCHAR', cat: 'VARCHAR', name: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'VARCHAR', "
        "dur: 'VARCHAR', args: 'STRUCT(" + fields.replace("'", "''") + ")'}"
    )
    num = (lambda e: e) if typed else (lambda e: f"TRY_CAST({e} AS BIGINT)")  # noqa: E731

    def dim(field: str, i: int) -> str:
        return f"args.{field}[{i}]" if typed else f"TRY_CAST(args.{field}->>'$[{i - 1}]' AS BIGINT)"

    ext = '"external id"' if legacy else '"External id"'
    a = "args."
    tid_digits = "TRY_CAST(regexp_extract(tid, '(\\d+)\\s*$', 1) AS BIGINT)"  # 'stream 7' -> 7
    return f"""
        SELECT ph, lower(coalesce(cat, '')) AS cat, coalesce(name, '') AS name,
               TRY_CAST(pid AS BIGINT) AS pid_int,
               CASE WHEN TRY_CAST(tid AS BIGINT) IS NOT NULL THEN TRY_CAST(tid AS BIGINT)
                   ELSE {tid_digits} END AS tid_int,
               {base_ns} + {_ns("ts")} AS start_ns,
               greatest(coalesce({_ns("dur")}, 0), 0) AS dur_ns,
               {num(a + ext)} AS external_id, {num(a + "correlation")} AS correlation_id, {num(a + "cbid")} AS cbid,
               {num(a + "device")} AS device_arg, {num(a + "stream")} AS stream_arg,
               {num(a + '"registers per thread"')} AS registers, {num(a + '"shared memory"')} AS shared_bytes,
               {dim("grid", 1)} AS grid_x, {dim("grid", 2)} AS grid_y, {dim("grid", 3)} AS grid_z,
               {dim("block", 1)} AS block_x, {dim("block", 2)} AS block_y, {dim("block", 3)} AS block_z,
               coalesce({num(a + "bytes")}, {num(a + "size")}) AS bytes, args.direction AS direction,
               {num(a + '"Sequence number"')} AS sequence_nr, {num(a + '"Fwd thread id"')} AS fwd_tid,
               args."Input Dims" AS input_shapes, args."Input type" AS input_types,
               args."Concrete Inputs" AS input_values,
               {num(a + '"Record function id"')} AS rf_id, args.cuda_sync_kind AS sync_kind,
               {num(a + '"Device Id"')} AS mem_device, {num(a + '"Device Type"')} AS mem_device_type,
               {num(a + '"Total Allocated"')} AS mem_allocated, {num(a + '"Total Reserved"')} AS mem_reserved,
               args."Collective name" AS coll_name, {num(a + '"In msg nelems"')} AS in_nelems,
               {num(a + '"Out msg nelems"')} AS out_nelems, {num(a + '"Group size"')} AS group_size,
               args.dtype AS coll_dtype, args."Process Group Name" AS pg_name,
               args."Process Group Ranks" AS pg_ranks
        FROM read_json([{", ".join(db.sql_str(str(e)) for e in events)}], columns={cols}, format='array')
        WHERE ph IN ('X', 'i', 'I')
    """


def _split(
    con: duckdb.DuckDBPyConnection, ev: str, prefix: str, rank: int, op_base: int, world_size: int | None = None
) -> tuple[dict[str, str], list[tuple[str, int]]]:
    """One query per table over the normalized events, each creating ``<prefix><table>``.
    Returns the relations by table and the categories left out (with counts)."""

    def cats(xs: Iterable[str]) -> str:
        return "(" + ", ".join(f"'{c}'" for c in xs) + ")"

    out: dict[str, str] = {}

    def q(name: str, sql: str) -> None:
        # a view: the builder's copy of it (interned, with row ids) is the only materialization
        con.execute(f"CREATE OR REPLACE TEMP VIEW {prefix}{name} AS {sql}")
        out[name] = f"{prefix}{name}"

    # the host process of each correlation id (GPU events carry the device as pid)
    launch = f"{prefix}launch"
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {launch} AS
        SELECT correlation_id, any_value(pid_int) AS pid, any_value(tid_int) AS tid FROM {ev}
        WHERE cat IN {cats(API_CATS)} AND correlation_id IS NOT NULL GROUP BY ALL""")
    main_pid = con.execute(f"""SELECT pid_int FROM {ev} WHERE cat IN {cats(OP_CATS + API_CATS)} AND pid_int IS NOT NULL
                               GROUP BY 1 ORDER BY count(*) DESC LIMIT 1""").fetchall()
    host_pid = main_pid[0][0] if main_pid else None
    # op ids in the trace's order (unique is all the schema asks; ordering them by time was a sort
    # of every op: 0.4 s on 285k)
    q(
        "ops",
        f"""
        SELECT {rank} AS rank, pid_int AS pid, tid_int AS tid, start_ns, start_ns + dur_ns AS end_ns, name,
               {op_base} + row_number() OVER () - 1 AS op_id, external_id, sequence_nr,
               fwd_tid, nullif(replace(input_shapes, ' ', ''), '[]') AS input_shapes,
               nullif(replace(input_types, ' ', ''), '[]') AS input_types,
               nullif(replace(input_values, ' ', ''), '[]') AS input_values,
               cat AS category, rf_id
        FROM {ev} WHERE ph = 'X' AND cat IN {cats(OP_CATS)}""",
    )
    q(
        "phases",
        f"""
        SELECT {rank} AS rank, pid_int AS pid, tid_int AS tid, start_ns, start_ns + dur_ns AS end_ns, name,
               'range' AS kind, 'record_function' AS source,
               CASE WHEN regexp_matches(name, '{TORCH_AUTO_PATTERN}') THEN '{TORCH_AUTO_DOMAIN}' END AS domain
        FROM {ev} WHERE ph = 'X' AND cat IN {cats(ANNOTATION_CATS)}
            AND NOT regexp_matches(name, '^ProfilerStep#\\d+$')""",
    )
    q(
        "steps",
        f"""
        SELECT {rank} AS rank, TRY_CAST(regexp_extract(name, '#(\\d+)$', 1) AS INTEGER) AS step,
               start_ns, start_ns + dur_ns AS end_ns, pid_int AS pid, tid_int AS tid,
               'profiler_step' AS source, FALSE AS warmup, TRUE AS traced
        FROM {ev} WHERE ph = 'X' AND cat IN {cats(ANNOTATION_CATS)} AND regexp_matches(name, '^ProfilerStep#\\d+$')
        QUALIFY row_number() OVER (PARTITION BY step ORDER BY start_ns) = 1""",
    )
    q(
        "api",
        f"""
        SELECT {rank} AS rank, pid_int AS pid, tid_int AS tid, start_ns, start_ns + dur_ns AS end_ns, name,
               correlation_id, external_id, cbid,
               CASE WHEN cat LIKE '%driver%' THEN 'driver' ELSE 'runtime' END AS kind
        FROM {ev} WHERE ph = 'X' AND cat IN {cats(API_CATS)}""",
    )
    src_kind = _mem_kind("regexp_extract(e.name, '\\((\\w+)\\s*->', 1)")
    dst_kind = _mem_kind("regexp_extract(e.name, '->\\s*(\\w+)\\)', 1)")
    set_kind = _mem_kind("regexp_extract(e.name, '\\((\\w+)\\)', 1)")
    gpu_common = f"""{rank} AS rank, coalesce(e.device_arg, e.pid_int) AS device,
               coalesce(e.stream_arg, e.tid_int) AS stream, e.start_ns, e.start_ns + e.dur_ns AS end_ns,
               e.correlation_id, e.external_id,
                   coalesce(l.pid, {host_pid if host_pid is not None else "NULL"}) AS pid"""
    launch_join = f"LEFT JOIN {launch} l ON l.correlation_id = e.correlation_id"
    q(
        "kernels",
        f"""
        SELECT {gpu_common}, e.name, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_bytes
        FROM {ev} e {launch_join}
        WHERE e.ph = 'X' AND e.cat IN {cats(KERNEL_CATS)}
            AND NOT (e.cat = 'mtia_ccp_events' AND e.name = 'dma_request')""",
    )
    q(
        "memcpy",
        f"""
        SELECT {gpu_common}, coalesce(e.bytes, 0) AS bytes,
               CASE WHEN e.cat = 'mtia_ccp_events' THEN
                        CASE e.direction WHEN 'DEVICE_TO_HOST' THEN 'DtoH' WHEN 'HOST_TO_DEVICE' THEN 'HtoD'
                             WHEN 'DEVICE_TO_DEVICE' THEN 'DtoD' ELSE 'unknown' END
                    ELSE coalesce(nullif(regexp_extract(e.name, '(HtoD|DtoH|DtoD|HtoH|PtoP)', 1), ''), 'unknown')
               END AS copy_kind,
               {src_kind} AS src_kind, {dst_kind} AS dst_kind
        FROM {ev} e {launch_join}
        WHERE e.ph = 'X' AND (e.cat IN {cats(MEMCPY_CATS)}
            OR (e.cat = 'mtia_ccp_events' AND e.name = 'dma_request'))""",
    )
    q(
        "memset",
        f"""
        SELECT {gpu_common}, coalesce(e.bytes, 0) AS bytes,
               {set_kind} AS mem_kind
        FROM {ev} e {launch_join} WHERE e.ph = 'X' AND e.cat IN {cats(MEMSET_CATS)}""",
    )
    q(
        "sync",
        f"""
        SELECT {rank} AS rank, l.pid, l.tid, e.device_arg AS device, coalesce(e.stream_arg, e.tid_int) AS stream,
               e.start_ns, e.start_ns + e.dur_ns AS end_ns, e.correlation_id,
               CASE lower(coalesce(e.sync_kind, e.name))
                   WHEN 'stream sync' THEN 'stream' WHEN 'event sync' THEN 'event'
                   WHEN 'context sync' THEN 'context' WHEN 'stream wait event' THEN 'stream_wait_event'
                   WHEN 'wait event' THEN 'stream_wait_event' ELSE 'unknown' END AS kind
        FROM {ev} e {launch_join} WHERE e.ph = 'X' AND e.cat = 'cuda_sync'""",
    )
    # a table, not a view: it is read three times (count, interning, copy) and scans every event
    con.execute(f"CREATE OR REPLACE TEMP TABLE {prefix}comms AS {comms_sql(ev, launch, rank, world_size, host_pid)}")
    out["comms"] = f"{prefix}comms"
    q(
        "counters",
        f"""
        SELECT {rank} AS rank, CASE WHEN mem_device_type = 0 THEN -1 ELSE mem_device END AS device,
               start_ns AS ts_ns, metric, value
        FROM (SELECT *, UNNEST(['torch_allocated', 'torch_reserved']) AS metric,
                        UNNEST([mem_allocated, mem_reserved])::DOUBLE AS value
              FROM {ev} WHERE ph IN ('i', 'I') AND cat = 'cpu_instant_event' AND name = '[memory]')
        WHERE value IS NOT NULL""",
    )
    skipped = con.execute(f"""
        SELECT cat, count(*) FROM {ev} WHERE cat NOT IN {
        cats(
            OP_CATS
            + ANNOTATION_CATS
            + API_CATS
            + KERNEL_CATS
            + MEMCPY_CATS
            + MEMSET_CATS
            + ("cuda_sync", "cpu_instant_event")
        )
    }
        GROUP BY 1 ORDER BY 2 DESC""").fetchall()
    return out, [(c, int(n)) for c, n in skipped]


def _mem_kind(expr: str) -> str:
    return f"""CASE lower({expr}) WHEN 'pageable' THEN 'pageable' WHEN 'pinned' THEN 'pinned'
               WHEN 'device' THEN 'device' WHEN 'managed' THEN 'managed' WHEN 'array' THEN 'array'
               ELSE 'unknown' END"""


def key_node_steps(con: duckdb.DuckDBPyConnection, rels: dict[str, str], key_node: str, rank: int, out: str) -> str:
    """Iterations from a named annotation or op, with DLProf's semantics (see analysis.iterations)."""
    parts = [
        f"SELECT {rank} AS rank, start_ns, end_ns, pid, tid FROM {rels[n]} WHERE name = $1" for n in ("phases", "ops")
    ]
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {out} AS " + key_node_steps_sql(f"({' UNION ALL '.join(parts)})"), [key_node]
    )
    if not _count(con, out):
        raise InputError(f"--key-node {key_node!r}: no range or op of that name in the trace")
    return out


def optimizer_steps(con: duckdb.DuckDBPyConnection, rels: dict[str, str], rank: int, out: str) -> str:
    """Iterations ending at each ``Optimizer.step#...`` (the first starts with the trace)."""
    first = " UNION ALL ".join(f"SELECT min(start_ns) AS t FROM {rels[n]}" for n in ("ops", "phases", "api"))
    con.execute(f"""CREATE OR REPLACE TEMP TABLE {out} AS
        SELECT {rank} AS rank, (row_number() OVER w - 1)::INTEGER AS step,
               coalesce(lag(end_ns) OVER w, (SELECT min(t) FROM ({first}))) AS start_ns, end_ns, pid, tid,
               'optimizer' AS source, FALSE AS warmup, TRUE AS traced
        FROM {rels["phases"]} WHERE name LIKE 'Optimizer.step#%' WINDOW w AS (ORDER BY end_ns)""")
    return out


def _fill_meta(
    meta: Meta, path: Path, md: dict[str, Any], rank: int, rows: dict[str, int], skipped: list[tuple[str, int]]
) -> None:
    meta.ranks.append(rank)
    world = _world_size(md)
    if world:
        meta.world_size = max(meta.world_size or 0, world)
    for d in _devices(md, rank):
        meta.add_device(d)
    for key, label in (
        ("cuda_runtime_version", "cuda_runtime"),
        ("cuda_driver_version", "cuda_driver"),
        ("cupti_version", "cupti"),
    ):
        if md.get(key) is not None:
            meta.frameworks[label] = str(md[key])
    meta.collectors.setdefault("kineto", CollectorStatus("ok", "", {"record_shapes": md.get("record_shapes")}))
    if not rows.get("ops"):
        meta.note(f"{path.name}: no framework ops (the trace was recorded without CPU activity)")
    if not (rows.get("kernels") or rows.get("memcpy") or rows.get("memset")):
        meta.note(f"{path.name}: no GPU activity (CPU-only trace, or recorded without CUDA activity)")
    if not rows.get("steps"):
        meta.note(f"{path.name}: no ProfilerStep#N ranges (name an iteration marker with --key-node)")
    if skipped:
        known = [f"{c} ({n})" for c, n in skipped if c not in KNOWN_SKIPPED and c]
        if known:
            meta.note(f"{path.name}: events of unknown categories not imported: {', '.join(known[:8])}")
