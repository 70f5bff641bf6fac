"""Reading an nsys export's event tables into dlscope tables (text name columns, epoch ns).

One function per dlscope table. Each selects only the columns the export has (older nsys
versions lack some) and does the per-row work in SQLite: splitting nsys's serialized global ids
into pid/tid, adding the clock offset, mapping enums. Names of kernels and API calls arrive as
``StringIds`` ids and are decoded once per distinct id into a dictionary array (a join per row
cost more than the rest of the import). A function returns None when the export has no such
events.

nsys serializes a thread as ``globalTid`` = (vm << 56) | (pid << 24) | tid, and a process as
``globalPid`` with the same pid bits, so pid = (id >> 24) & 0xFFFFFF and tid = id & 0xFFFFFF.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .arrow_values import fitted, typed_array
from .nsys_db import NsysExport

MASK24 = 0xFFFFFF
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE; stable across nsys versions)
NVTX_MARKS = (34, 65)  # NvtxMark, NvtxtMark
NVTX_PUSHPOP = (59, 70)  # NvtxPushPopRange, NvtxtPushPopRange
NVTX_STARTEND = (60, 71)  # NvtxStartEndRange, NvtxtStartEndRange
NVTX_DOMAIN_CREATE = 75

# Enum names (suffix after the last known prefix) -> dlscope's values. The export's own ENUM_*
# tables are read when present, because nsys numbers memory kinds differently from CUPTI.
COPY_KINDS = {
    "HTOD": "HtoD",
    "DTOH": "DtoH",
    "DTOD": "DtoD",
    "HTOH": "HtoH",
    "PTOP": "PtoP",
    "HTOA": "HtoA",
    "ATOH": "AtoH",
    "ATOA": "AtoA",
    "ATOD": "AtoD",
    "DTOA": "DtoA",
    "UVM_HTOD": "UVM_HtoD",
    "UVM_DTOH": "UVM_DtoH",
    "UVM_DTOD": "UVM_DtoD",
}
MEM_KINDS = {
    "PAGEABLE": "pageable",
    "PINNED": "pinned",
    "DEVICE": "device",
    "ARRAY": "array",
    "MANAGED": "managed",
    "DEVICE_STATIC": "device_static",
    "MANAGED_STATIC": "managed_static",
}
SYNC_KINDS = {
    "EVENT_SYNCHRONIZE": "event",
    "STREAM_WAIT_EVENT": "stream_wait_event",
    "STREAM_SYNCHRONIZE": "stream",
    "CONTEXT_SYNCHRONIZE": "context",
}
# nsys's numbering (schema 3.x) for exports without the ENUM tables
DEFAULT_COPY_IDS = {
    1: "HTOD",
    2: "DTOH",
    3: "HTOA",
    4: "ATOH",
    5: "ATOA",
    6: "ATOD",
    7: "DTOA",
    8: "DTOD",
    9: "HTOH",
    10: "PTOP",
    11: "UVM_HTOD",
    12: "UVM_DTOH",
    13: "UVM_DTOD",
}
DEFAULT_MEM_IDS = {
    0: "PAGEABLE",
    1: "PINNED",
    2: "DEVICE",
    3: "ARRAY",
    4: "MANAGED",
    5: "DEVICE_STATIC",
    6: "MANAGED_STATIC",
}
DEFAULT_SYNC_IDS = {1: "EVENT_SYNCHRONIZE", 2: "STREAM_WAIT_EVENT", 3: "STREAM_SYNCHRONIZE", 4: "CONTEXT_SYNCHRONIZE"}


def pid_of(expr: str) -> str:
    return f"(({expr} >> 24) & {MASK24})"


def tid_of(expr: str) -> str:
    return f"({expr} & {MASK24})"


def api_display_name(name: str) -> str:
    """The name nsys prints for a CUDA API call: CUPTI names some calls with a version suffix of
    exactly ``_v`` and four characters (``cudaLaunchKernel_v7000``) that nsys drops; longer
    suffixes (``cudaStreamIsCapturing_v10000``) stay. Stored this way, names also match other
    sources (Kineto says ``cudaLaunchKernel``)."""
    return name[:-6] if name[-6:-4] == "_v" else name


def decode_names(x: NsysExport, ids: pa.ChunkedArray, transform: Callable[[str], str] | None = None) -> pa.Array:
    """StringIds ids -> a dictionary-encoded string array, looking each distinct id up once
    (unknown or null ids become ''; a value SQLite holds as other than text, as a damaged
    database can, is read as :func:`arrow_values.fitted` reads it)."""
    flat = ids.combine_chunks().fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    uniq, inverse = np.unique(flat, return_inverse=True)
    wanted = [int(u) for u in uniq if u >= 0]
    found: dict[int, str] = {}
    for i in range(0, len(wanted), 10_000):  # SQLite caps the number of bound parameters
        part = wanted[i : i + 10_000]
        found.update(x.rows(f"SELECT id, value FROM StringIds WHERE id IN ({', '.join('?' * len(part))})", part))
    values = [fitted(found.get(int(u)), pa.string()) or "" for u in uniq]
    if transform is not None:
        values = [transform(v) for v in values]
    return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32)), pa.array(values, pa.string()))


def _named(x: NsysExport, t: pa.Table, id_col: str, transform: Callable[[str], str] | None = None) -> pa.Table:
    """Replace the StringIds id column ``id_col`` by the text column ``name``."""
    names = decode_names(x, t[id_col], transform) if t.num_rows else pa.array([], pa.string())
    return t.drop_columns([id_col]).append_column("name", names)


def _enum_case(
    x: NsysExport,
    enum_table: str,
    column: str,
    names: dict[str, str],
    defaults: dict[int, str],
    fallback: str = "'unknown'",
) -> str:
    """SQL CASE mapping the integer ``column`` to dlscope's text through the export's enum table
    (matched by the end of each enum name), else through nsys's default numbering."""
    ids: dict[int, str] = {}
    if x.has(enum_table, "id", "name"):
        for i, name in x.rows(f"SELECT id, name FROM {enum_table}"):
            key = next((k for k in sorted(names, key=len, reverse=True) if str(name).upper().endswith("_" + k)), None)
            if key is not None:
                ids[int(i)] = names[key]
    else:
        ids = {i: names[n] for i, n in defaults.items()}
    if not ids:
        return fallback
    whens = " ".join(f"WHEN {i} THEN '{v}'" for i, v in sorted(ids.items()))
    return f"CASE {column} {whens} ELSE {fallback} END"


def _query(x: NsysExport, select: dict[str, tuple[str, pa.DataType]], from_sql: str) -> pa.Table:
    """Run ``SELECT expr AS name, ... from_sql`` and build an Arrow table chunk by chunk."""
    schema = pa.schema([(n, t) for n, (_, t) in select.items()])
    sql = "SELECT " + ", ".join(f"{expr} AS {n}" for n, (expr, _) in select.items()) + " " + from_sql
    batches = [
        pa.record_batch([typed_array(col, f.type) for col, f in zip(zip(*chunk), schema)], schema=schema)
        for chunk in x.chunks(sql)
    ]
    return pa.Table.from_batches(batches, schema=schema)


I64, I32, STR = pa.int64(), pa.int32(), pa.string()


def read_kernels(x: NsysExport, offset_ns: int) -> pa.Table | None:
    if not x.has(KERNEL, "start", "end"):
        return None
    # the templated (demangled) name is what nsys prints by default
    name_col = next((c for c in ("demangledName", "shortName", "mangledName") if x.has(KERNEL, c)), None)

    def c(col: str, expr: str | None = None) -> str:
        return x.col(KERNEL, col, expr, "k")

    static = c("staticSharedMemory")
    dynamic = c("dynamicSharedMemory")
    t = _query(
        x,
        {
            "start_ns": (f"k.start + {offset_ns}", I64),
            "end_ns": (f"k.end + {offset_ns}", I64),
            "device": (c("deviceId"), I32),
            "stream": (c("streamId"), I64),
            "context": (c("contextId"), I32),
            "correlation_id": (c("correlationId"), I64),
            "pid": (c("globalPid", pid_of("k.globalPid")), I64),
            "name_sid": (f"k.{name_col}" if name_col else "NULL", I64),
            "grid_x": (c("gridX"), I32),
            "grid_y": (c("gridY"), I32),
            "grid_z": (c("gridZ"), I32),
            "block_x": (c("blockX"), I32),
            "block_y": (c("blockY"), I32),
            "block_z": (c("blockZ"), I32),
            "registers": (c("registersPerThread"), I32),
            "static_shared_bytes": (static, I64),
            "dynamic_shared_bytes": (dynamic, I64),
            "shared_bytes": (f"{static} + {dynamic}" if "NULL" not in (static, dynamic) else "NULL", I64),
        },
        f"FROM {KERNEL} k",
    )
    return _named(x, t, "name_sid")


def _gpu_activity_columns(c: Any, offset_ns: int) -> dict[str, tuple[str, Any]]:
    """Where and when a copy or a memset ran: the columns every CUPTI activity table of the
    export shares (aliased ``m``)."""
    return {
        "start_ns": (f"m.start + {offset_ns}", I64),
        "end_ns": (f"m.end + {offset_ns}", I64),
        "device": (c("deviceId"), I32),
        "stream": (c("streamId"), I64),
        "context": (c("contextId"), I32),
        "correlation_id": (c("correlationId"), I64),
    }


def read_memcpy(x: NsysExport, offset_ns: int) -> pa.Table | None:
    if not x.has(MEMCPY, "start", "end"):
        return None

    def c(col: str, expr: str | None = None) -> str:
        return x.col(MEMCPY, col, expr, "m")

    copy_kind = (
        _enum_case(x, "ENUM_CUDA_MEMCPY_OPER", "m.copyKind", COPY_KINDS, DEFAULT_COPY_IDS)
        if x.has(MEMCPY, "copyKind")
        else "'unknown'"
    )
    src = (
        _enum_case(x, "ENUM_CUDA_MEM_KIND", "m.srcKind", MEM_KINDS, DEFAULT_MEM_IDS)
        if x.has(MEMCPY, "srcKind")
        else "NULL"
    )
    dst = (
        _enum_case(x, "ENUM_CUDA_MEM_KIND", "m.dstKind", MEM_KINDS, DEFAULT_MEM_IDS)
        if x.has(MEMCPY, "dstKind")
        else "NULL"
    )
    return _query(
        x,
        {
            **_gpu_activity_columns(c, offset_ns),
            "bytes": (c("bytes", "coalesce(m.bytes, 0)") if x.has(MEMCPY, "bytes") else "0", I64),
            "copy_kind": (copy_kind, STR),
            "src_kind": (src, STR),
            "dst_kind": (dst, STR),
            "pid": (c("globalPid", pid_of("m.globalPid")), I64),
        },
        f"FROM {MEMCPY} m",
    )


def read_memset(x: NsysExport, offset_ns: int) -> pa.Table | None:
    if not x.has(MEMSET, "start", "end"):
        return None

    def c(col: str, expr: str | None = None) -> str:
        return x.col(MEMSET, col, expr, "m")

    kind = (
        _enum_case(x, "ENUM_CUDA_MEM_KIND", "m.memKind", MEM_KINDS, DEFAULT_MEM_IDS)
        if x.has(MEMSET, "memKind")
        else "NULL"
    )
    return _query(
        x,
        {
            **_gpu_activity_columns(c, offset_ns),
            "bytes": ("coalesce(m.bytes, 0)" if x.has(MEMSET, "bytes") else "0", I64),
            "mem_kind": (kind, STR),
            "pid": (c("globalPid", pid_of("m.globalPid")), I64),
        },
        f"FROM {MEMSET} m",
    )


def _split_thread_ids(t: pa.Table, column: str) -> pa.Table:
    """Replace nsys's serialized thread id ``column`` by pid and tid columns (vectorized; fewer
    values cross from SQLite to Python than when SQLite splits them)."""
    gtid = pc.fill_null(t[column], -1).to_numpy().astype(np.int64)
    null = t[column].is_null().to_numpy(zero_copy_only=False)
    pid = pa.array((gtid >> 24) & MASK24, I64, mask=null)
    tid = pa.array(gtid & MASK24, I64, mask=null)
    return t.drop_columns([column]).append_column("pid", pid).append_column("tid", tid)


def read_api(x: NsysExport, offset_ns: int) -> pa.Table | None:
    """CUDA runtime and driver calls. nsys stores no CUPTI callback id, so ``cbid`` stays null.
    This is usually the largest table: only integers come out of SQLite."""
    if not x.has(RUNTIME, "start", "end", "nameId"):
        return None

    def c(col: str, expr: str | None = None) -> str:
        return x.col(RUNTIME, col, expr, "r")

    t = _query(
        x,
        {
            "start_ns": (f"r.start + {offset_ns}", I64),
            "end_ns": (f"r.end + {offset_ns}", I64),
            "gtid": (c("globalTid"), I64),
            "correlation_id": (c("correlationId"), I64),
            "name_sid": ("r.nameId", I64),
            "event_class": (c("eventClass"), I32),
        },
        f"FROM {RUNTIME} r",
    )
    t = _split_thread_ids(_named(x, t, "name_sid", api_display_name), "gtid")
    if x.has(RUNTIME, "eventClass"):  # ENUM_NSYS_EVENT_CLASS: 0 CUDA runtime, 1 CUDA driver
        driver = pc.fill_null(pc.equal(t["event_class"], 1), False)
    else:
        driver = pc.invert(pc.starts_with(t["name"].cast(pa.string()), "cuda"))
    kind = pc.if_else(driver, "driver", "runtime") if t.num_rows else pa.array([], STR)
    return t.drop_columns(["event_class"]).append_column("kind", kind)


# API call name patterns -> the wait they make, most specific first
_SYNC_CALLS = (
    ("StreamWaitEvent", "stream_wait_event"),
    ("StreamSynchronize", "stream"),
    ("EventSynchronize", "event"),
    ("DeviceSynchronize", "context"),
    ("CtxSynchronize", "context"),
)


def read_sync(x: NsysExport, offset_ns: int, api: pa.Table | None) -> pa.Table | None:
    """Host waits on the GPU, with the thread and kind of the API call that waited (matched in
    ``api`` by correlation id and process). The kind comes from that call's name when there is
    one: the export's own enum disagrees with its data in nsys 2025.3 (cudaStreamSynchronize
    records carry the id its ENUM_CUPTI_SYNC_TYPE calls 'stream wait event')."""
    if not x.has(SYNC, "start", "end"):
        return None

    def c(col: str, expr: str | None = None) -> str:
        return x.col(SYNC, col, expr, "y")

    by_enum = (
        _enum_case(x, "ENUM_CUPTI_SYNC_TYPE", "y.syncType", SYNC_KINDS, DEFAULT_SYNC_IDS)
        if x.has(SYNC, "syncType")
        else "'unknown'"
    )
    t = _query(
        x,
        {
            "start_ns": (f"y.start + {offset_ns}", I64),
            "end_ns": (f"y.end + {offset_ns}", I64),
            "pid": (c("globalPid", pid_of("y.globalPid")), I64),
            "device": (c("deviceId"), I32),
            "stream": (c("streamId"), I64),
            "correlation_id": (c("correlationId"), I64),
            "enum_kind": (by_enum, STR),
        },
        f"FROM {SYNC} y",
    )
    if api is None or not t.num_rows:
        return t.rename_columns([n if n != "enum_kind" else "kind" for n in t.column_names])
    calls = api.select(["correlation_id", "pid", "tid", "name"]).rename_columns(
        ["correlation_id", "pid", "tid", "api_name"]
    )
    t = t.join(calls, keys=["correlation_id", "pid"], join_type="left outer")
    names = pc.fill_null(t["api_name"].cast(pa.string()), "")
    kind = t["enum_kind"]
    for pattern, value in reversed(_SYNC_CALLS):
        kind = pc.if_else(pc.match_substring(names, pattern), value, kind)
    return t.drop_columns(["api_name", "enum_kind"]).append_column("kind", kind)


def _nvtx_text(x: NsysExport, event: str, strings: str) -> tuple[str, str]:
    """(SQL text of an NVTX event, join that it needs): a registered string (textId) or inline text."""
    has_id, has_text = x.has(NVTX, "textId"), x.has(NVTX, "text")
    join = f" LEFT JOIN StringIds {strings} ON {strings}.id = {event}.textId" if has_id else ""
    if has_id and has_text:
        return f"coalesce({strings}.value, {event}.text)", join
    return (f"{strings}.value" if has_id else f"{event}.text" if has_text else "NULL"), join


def read_nvtx(x: NsysExport, offset_ns: int) -> tuple[pa.Table | None, int]:
    """NVTX ranges and marks as phases (source 'nvtx'). Returns (table, ranges never closed).

    A range's domain is the text of the domain-create event with its domain id in the same
    process (id 0, the default domain, has none: NULL). Ranges never closed end at the export's
    last NVTX timestamp, as nsys's own summaries treat them."""
    if not x.has(NVTX, "start", "end", "eventType"):
        return None, 0
    text, join_text = _nvtx_text(x, "e", "s")
    has_tid = x.has(NVTX, "globalTid")
    domain, join_domain = "NULL", ""
    if x.has(NVTX, "domainId") and has_tid:
        dom_text, dom_join = _nvtx_text(x, "d0", "ds")
        # min(start) makes SQLite take the name from the first create event of the domain
        join_domain = f"""
            LEFT JOIN (SELECT d0.domainId AS id, {pid_of("d0.globalTid")} AS pid, min(d0.start) AS first,
                              {dom_text} AS name
                       FROM {NVTX} d0{dom_join} WHERE d0.eventType = {NVTX_DOMAIN_CREATE} GROUP BY 1, 2) d
              ON d.id = e.domainId AND d.pid = {pid_of("e.globalTid")}"""
        domain = "d.name"
    ranges = ", ".join(map(str, NVTX_PUSHPOP + NVTX_STARTEND))
    marks = ", ".join(map(str, NVTX_MARKS))
    startend = ", ".join(map(str, NVTX_STARTEND))
    last = x.scalar(f"SELECT max(coalesce(max(start), 0), coalesce(max(end), 0)) FROM {NVTX}") or 0
    unclosed = int(x.scalar(f"SELECT count(*) FROM {NVTX} WHERE end IS NULL AND eventType IN ({ranges})") or 0)
    table = _query(
        x,
        {
            "start_ns": (f"e.start + {offset_ns}", I64),
            "end_ns": (
                f"CASE WHEN e.eventType IN ({marks}) THEN e.start ELSE coalesce(e.end, {int(last)}) END + {offset_ns}",
                I64,
            ),
            "pid": (pid_of("e.globalTid") if has_tid else "NULL", I64),
            "tid": (tid_of("e.globalTid") if has_tid else "NULL", I64),
            "name": (f"coalesce({text}, '')", STR),
            "domain": (domain, STR),
            "kind": (f"CASE WHEN e.eventType IN ({marks}) THEN 'mark' ELSE 'range' END", STR),
            "style": (
                (
                    f"CASE WHEN e.eventType IN ({marks}) THEN NULL WHEN e.eventType IN ({startend}) "
                    "THEN 'startend' ELSE 'pushpop' END"
                ),
                STR,
            ),
            "source": ("'nvtx'", STR),
        },
        f"FROM {NVTX} e{join_text}{join_domain} WHERE e.eventType IN ({ranges}, {marks})",
    )
    return (table if table.num_rows else None), unclosed
