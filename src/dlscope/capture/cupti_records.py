"""CUPTI activity records in bulk: walking a raw buffer, the spool format, and decoding.

A CUPTI activity buffer is a sequence of records, each starting with its ``CUpti_ActivityKind``
(uint32) and as long as its kind's struct (8-byte aligned). Records are never turned into one
Python object each: a buffer is walked once to find where each record starts (a tight loop over
one integer per record), the records of one kind are gathered into a contiguous block with one
numpy operation, and blocks are appended to the spool. At finalize a block is viewed through a
numpy structured dtype built from the field offsets the recorder wrote down (taken from
cupti-python's own dtypes for the struct version the running CUPTI writes), so decoding needs
neither CUPTI nor cupti-python and works on another machine.

Files, named after the recording process's pid:

* ``PID.cupti.json``   layouts per kind (size, fields: name -> [offset, numpy type]), the
  CUPTI-timestamp -> monotonic offset, enum names, counts and dropped records.
* ``PID.cupti.spool``  ``DLCUPTI1`` then blocks ``<4q (kind, record_size, n, 0)`` + n records.
* ``PID.cupti.names.jsonl``  ``["k", pointer, name]`` (kernel names: CUPTI gives a pointer into
  its own memory, resolved while the process lives) and ``["a", kind, cbid, name]`` (API names).
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

MAGIC = b"DLCUPTI1"
BLOCK = struct.Struct("<4q")

# The fields dlscope reads, per table; names as in cupti-python's dtypes.
KERNEL_FIELDS = (
    "start",
    "end",
    "device_id",
    "stream_id",
    "correlation_id",
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "static_shared_memory",
    "dynamic_shared_memory",
    "name",
)
MEMCPY_FIELDS = (
    "copy_kind",
    "src_kind",
    "dst_kind",
    "bytes",
    "start",
    "end",
    "device_id",
    "stream_id",
    "correlation_id",
)
MEMSET_FIELDS = ("bytes", "start", "end", "device_id", "stream_id", "correlation_id", "memory_kind")
API_FIELDS = ("cbid", "start", "end", "process_id", "thread_id", "correlation_id")
SYNC_FIELDS = ("type", "start", "end", "correlation_id", "stream_id")

# Which table each CUPTI kind feeds, and the fields it needs.
TABLE_OF_KIND: dict[str, tuple[str, tuple[str, ...]]] = {
    "CONCURRENT_KERNEL": ("kernels", KERNEL_FIELDS),
    "MEMCPY": ("memcpy", MEMCPY_FIELDS),
    "MEMSET": ("memset", MEMSET_FIELDS),
    "RUNTIME": ("api", API_FIELDS),
    "DRIVER": ("api", API_FIELDS),
    "SYNCHRONIZATION": ("sync", SYNC_FIELDS),
}

# CUPTI enum member names -> the schema's values.
COPY_KINDS = {"HTOD": "HtoD", "DTOH": "DtoH", "DTOD": "DtoD", "HTOH": "HtoH", "PTOP": "PtoP"}
MEMORY_KINDS = {
    "PAGEABLE": "pageable",
    "PINNED": "pinned",
    "DEVICE": "device",
    "MANAGED": "managed",
    "ARRAY": "array",
    "DEVICE_STATIC": "device",
    "MANAGED_STATIC": "managed",
}
SYNC_KINDS = {
    "EVENT_SYNCHRONIZE": "event",
    "STREAM_WAIT_EVENT": "stream_wait_event",
    "STREAM_SYNCHRONIZE": "stream",
    "CONTEXT_SYNCHRONIZE": "context",
}

_VERSION_SUFFIX = re.compile(r"_v\d{4,5}$")  # CUPTI's runtime-API version tags; driver names keep _v2


def api_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name nsys shows);
    ``cuMemcpyHtoDAsync_v2`` is a driver function's real name and stays."""
    return _VERSION_SUFFIX.sub("", raw)


# ---- walking a raw buffer (recording side: standard library only) -----------------------------
def walk(buf: Any, valid: int, sizes: dict[int, int], start: int = 0) -> tuple[dict[int, list[int]], int]:
    """Record offsets per kind from ``start`` until the end of ``valid`` bytes or the first record
    of a kind whose size is unknown. Returns (offsets by kind, where the walk stopped)."""
    kinds = (
        memoryview(buf).cast("B")[:valid].cast("I")
        if valid % 4 == 0
        else memoryview(buf).cast("B")[: valid - valid % 4].cast("I")
    )
    table = [0] * 128
    for k, s in sizes.items():
        if 0 <= k < len(table):
            table[k] = s
    out: dict[int, list[int]] = {}
    pos = start
    limit = len(kinds) * 4
    last_kind, last_list = -1, None
    while pos < limit:
        k = kinds[pos >> 2]
        size = table[k] if k < 128 else 0
        if not size:
            break
        if k != last_kind:
            last_list = out.get(k)
            if last_list is None:
                last_list = out[k] = []
            last_kind = k
        last_list.append(pos)  # type: ignore[union-attr]  # set above whenever the kind changed
        pos += size
    return out, pos


def gather(buf: Any, offsets: list[int], size: int) -> bytes:
    """The records at ``offsets`` (each ``size`` bytes) as one contiguous block."""
    import numpy as np

    raw = np.frombuffer(buf, dtype=np.uint8)
    rows = np.lib.stride_tricks.sliding_window_view(raw, size)  # row i = the bytes at i..i+size: no copy
    return rows[np.asarray(offsets, dtype=np.int64)].tobytes()


def block(kind: int, size: int, records: bytes) -> bytes:
    return BLOCK.pack(kind, size, len(records) // size, 0) + records


# ---- reading the spool (finalize) --------------------------------------------------------------
def read_blocks(path: Path) -> tuple[dict[int, list[tuple[int, bytes]]], bool]:
    """kind -> [(record size, records bytes)], and whether the file ended inside a block."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError("not a dlscope CUPTI spool")
    pos, end = len(MAGIC), len(data)
    out: dict[int, list[tuple[int, bytes]]] = {}
    torn = False
    while pos < end:
        if end - pos < BLOCK.size:
            torn = True
            break
        kind, size, n, _ = BLOCK.unpack_from(data, pos)
        pos += BLOCK.size
        if size <= 0 or n < 0 or size % 8:
            raise ValueError(f"corrupt block header at byte {pos - BLOCK.size}")
        avail = min(n, (end - pos) // size)
        torn = torn or avail < n
        out.setdefault(kind, []).append((size, data[pos : pos + avail * size]))
        pos += avail * size
        if avail < n:
            break
    return out, torn


def read_names(path: Path) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """(kernel name by pointer, API name by (kind, cbid)); a torn last line is ignored."""
    kernels: dict[int, str] = {}
    apis: dict[tuple[int, int], str] = {}
    if not path.exists():
        return kernels, apis
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                item = json.loads(line)
            except ValueError:
                break
            if item[0] == "k":
                kernels[int(item[1])] = str(item[2])
            elif item[0] == "a":
                apis[(int(item[1]), int(item[2]))] = str(item[3])
    return kernels, apis


def view(records: bytes, size: int, fields: dict[str, list[Any]], wanted: tuple[str, ...]) -> Any:
    """A numpy structured view of ``records`` with the ``wanted`` fields (missing ones skipped)."""
    import numpy as np

    names = [f for f in wanted if f in fields]
    dt = np.dtype(
        {
            "names": names,
            "formats": [fields[f][1] for f in names],
            "offsets": [int(fields[f][0]) for f in names],
            "itemsize": size,
        }
    )
    return np.frombuffer(records, dtype=dt)


def decode_tables(
    blocks: dict[int, list[tuple[int, bytes]]],
    header: dict[str, Any],
    kernel_names: dict[int, str],
    api_names: dict[tuple[int, int], str],
    *,
    rank: int,
    pid: int,
    offset_ns: int,
) -> dict[str, Any]:
    """pyarrow tables (text name columns) for the kinds in ``blocks``."""
    import numpy as np
    import pyarrow as pa

    layouts = header.get("layouts", {})
    kind_names = {int(v["kind"]): k for k, v in layouts.items()}
    shift = int(header.get("clock", {}).get("cupti_to_mono_ns", 0)) + offset_ns
    enums = header.get("enums", {})
    parts: dict[str, list[Any]] = {}
    for kind, items in blocks.items():
        kname = kind_names.get(kind)
        if kname not in TABLE_OF_KIND:
            continue
        table, wanted = TABLE_OF_KIND[kname]
        lay = layouts[kname]
        recs = [view(b, size, lay["fields"], wanted) for size, b in items if size == int(lay["size"]) and b]
        if not recs:
            continue
        r = np.concatenate(recs)
        n = len(r)
        start = r["start"].astype(np.int64) + shift
        end = np.maximum(r["end"].astype(np.int64) + shift, start)
        cols: dict[str, Any] = {
            "rank": np.full(n, rank, np.int32),
            "start_ns": start,
            "end_ns": end,
            "correlation_id": r["correlation_id"].astype(np.int64),
        }
        if table == "kernels":
            ptrs = r["name"].astype(np.int64)
            cols.update(
                device=r["device_id"].astype(np.int32),
                stream=r["stream_id"].astype(np.int64),
                pid=np.full(n, pid, np.int64),
                name=_lookup(ptrs, kernel_names, "<unknown kernel>"),
            )
            for a, b in (
                ("grid_x", "grid_x"),
                ("grid_y", "grid_y"),
                ("grid_z", "grid_z"),
                ("block_x", "block_x"),
                ("block_y", "block_y"),
                ("block_z", "block_z"),
                ("registers", "registers_per_thread"),
            ):
                cols[a] = r[b].astype(np.int32)
            st = r["static_shared_memory"].astype(np.int64)
            dy = r["dynamic_shared_memory"].astype(np.int64)
            cols.update(static_shared_bytes=st, dynamic_shared_bytes=dy, shared_bytes=st + dy)
        elif table == "memcpy":
            cols.update(
                device=r["device_id"].astype(np.int32),
                stream=r["stream_id"].astype(np.int64),
                bytes=r["bytes"].astype(np.int64),
                pid=np.full(n, pid, np.int64),
                copy_kind=_enum(r["copy_kind"], enums.get("memcpy_kind", {}), COPY_KINDS),
                src_kind=_enum(r["src_kind"], enums.get("memory_kind", {}), MEMORY_KINDS),
                dst_kind=_enum(r["dst_kind"], enums.get("memory_kind", {}), MEMORY_KINDS),
            )
        elif table == "memset":
            cols.update(
                device=r["device_id"].astype(np.int32),
                stream=r["stream_id"].astype(np.int64),
                bytes=r["bytes"].astype(np.int64),
                pid=np.full(n, pid, np.int64),
                mem_kind=_enum(r["memory_kind"], enums.get("memory_kind", {}), MEMORY_KINDS),
            )
        elif table == "api":
            cbid = r["cbid"].astype(np.int64)
            cols.update(
                pid=r["process_id"].astype(np.int64),
                tid=r["thread_id"].astype(np.int64),
                cbid=cbid.astype(np.int32),
                kind=["runtime" if kname == "RUNTIME" else "driver"] * n,
                name=_lookup(cbid, {c: v for (k, c), v in api_names.items() if k == kind}, "<unknown API call>"),
            )
        elif table == "sync":
            cols.update(
                stream=r["stream_id"].astype(np.int64),
                pid=np.full(n, pid, np.int64),
                kind=_enum(r["type"], enums.get("sync_type", {}), SYNC_KINDS),
            )
        parts.setdefault(table, []).append(pa.table(cols))
    out = {t: pa.concat_tables(p, promote_options="default") if len(p) > 1 else p[0] for t, p in parts.items()}
    if "sync" in out and "api" in out:
        out["sync"] = _sync_threads(out["sync"], out["api"])
    return out


def _sync_threads(sync: Any, api: Any) -> Any:
    """Synchronization records carry no thread: take it from the API call they belong to."""
    import numpy as np

    corr = api.column("correlation_id").to_numpy()
    order = np.argsort(corr, kind="stable")
    keys = corr[order]
    want = sync.column("correlation_id").to_numpy()
    pos = np.clip(np.searchsorted(keys, want), 0, max(len(keys) - 1, 0))
    hit = keys[pos] == want if len(keys) else np.zeros(len(want), bool)
    tid = np.where(hit, api.column("tid").to_numpy()[order][pos], -1)
    import pyarrow as pa

    return sync.append_column("tid", pa.array(tid, mask=~hit))


def _lookup(keys: Any, names: dict[int, str], missing: str) -> Any:
    import numpy as np
    import pyarrow as pa

    uniq, inv = np.unique(keys, return_inverse=True)
    texts = np.array([names.get(int(u), missing) for u in uniq.tolist()], dtype=object)
    return pa.array(texts[inv].tolist() if len(keys) else [], pa.string())


def _enum(values: Any, members: dict[str, str], schema_names: dict[str, str]) -> Any:
    """CUPTI enum values -> schema strings, via the member names the recorder wrote down."""
    by_value = {int(v): schema_names.get(name, "unknown") for v, name in members.items()}
    return _lookup(values.astype("int64"), by_value, "unknown")
