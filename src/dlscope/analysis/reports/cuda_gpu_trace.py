"""cuda_gpu_trace: every kernel, copy and set in start order, as ``nsys stats --report cuda_gpu_trace``.

``Start (ns)`` counts from the profile's time origin the way nsys counts from its session start:
``meta.clock['origin_ns']`` (the nsys importer stores the session start there, so an imported
export shows nsys's own timestamps), else the profile's start, else the first GPU event.
Throughput follows nsys's formula, bytes * (10^9 // duration) with integer division, in MB/s.
``GreenCtx`` (a green context id, set only for work in green contexts) is not stored and stays empty.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import (
    MEMORY_LABELS,
    MEMSET_NAME,
    AnyOfReport,
    gpu_in_selection,
    label_sql,
    megabytes,
    memcpy_name_sql,
)
from ..core.report import ReportResult

COLUMNS = (
    "Start (ns)",
    "Duration (ns)",
    "CorrId",
    "GrdX",
    "GrdY",
    "GrdZ",
    "BlkX",
    "BlkY",
    "BlkZ",
    "Reg/Trd",
    "StcSMem (MB)",
    "DymSMem (MB)",
    "Bytes (MB)",
    "Throughput (MB/s)",
    "SrcMemKd",
    "DstMemKd",
    "Device",
    "Ctx",
    "GreenCtx",
    "Strm",
    "Name",
)
_KERNEL_ONLY = (
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers",
    "static_shared_bytes",
    "dynamic_shared_bytes",
)


def time_origin_sql(data: ProfileData, gpu_union: str) -> str:
    origin = data.meta.clock.get("origin_ns") if isinstance(data.meta.clock, dict) else None
    if origin is None:
        origin = data.meta.start_ns
    return str(int(origin)) if origin is not None else f"(SELECT min(start_ns) FROM ({gpu_union}))"


def device_name_sql(data: ProfileData) -> str:
    """SQL VALUES list (index, name) of the profile's GPUs, for nsys's 'NAME (index)'."""
    pairs = [
        (d.get("index"), d.get("name")) for d in data.meta.devices if isinstance(d.get("index"), int) and d.get("name")
    ]
    if not pairs:
        return "(SELECT NULL::INTEGER AS idx, NULL::VARCHAR AS name WHERE FALSE)"
    values = ", ".join(f"({i}, '{str(n).replace(chr(39), chr(39) * 2)}')" for i, n in pairs)
    return f"(SELECT * FROM (VALUES {values}) v(idx, name))"


def compute(data: ProfileData) -> ReportResult:
    nulls = ", ".join(f"NULL AS {c}" for c in _KERNEL_ONLY)
    parts = []
    if data.has("kernels"):
        kcols = ", ".join(f"k.{c}" for c in _KERNEL_ONLY)
        parts.append(f"""SELECT k.rank, k.start_ns, k.end_ns, k.correlation_id, {kcols}, NULL::BIGINT AS bytes,
                                NULL AS src, NULL AS dst, k.device, k.context, k.stream, k.name
                         FROM kernels k WHERE {gpu_in_selection(data, "k")}""")
    if data.has("memcpy"):
        parts.append(f"""SELECT m.rank, m.start_ns, m.end_ns, m.correlation_id, {nulls}, m.bytes,
                                {label_sql("m.src_kind", MEMORY_LABELS)} AS src,
                                {label_sql("m.dst_kind", MEMORY_LABELS)} AS dst, m.device, m.context, m.stream,
                                {memcpy_name_sql("m.copy_kind")} AS name
                         FROM memcpy m WHERE {gpu_in_selection(data, "m")}""")
    if data.has("memset"):
        parts.append(f"""SELECT m.rank, m.start_ns, m.end_ns, m.correlation_id, {nulls}, m.bytes,
                                CASE WHEN m.mem_kind IS NULL THEN NULL
                                     ELSE {label_sql("m.mem_kind", MEMORY_LABELS)} END AS src,
                                NULL AS dst, m.device, m.context, m.stream, '{MEMSET_NAME}' AS name
                         FROM memset m WHERE {gpu_in_selection(data, "m")}""")
    union = " UNION ALL ".join(parts)
    table = data.table(f"""
        WITH g AS ({union})
        SELECT g.start_ns - {time_origin_sql(data, union)} AS "Start (ns)", g.end_ns - g.start_ns AS "Duration (ns)",
               g.correlation_id AS "CorrId", g.grid_x AS "GrdX", g.grid_y AS "GrdY", g.grid_z AS "GrdZ",
               g.block_x AS "BlkX", g.block_y AS "BlkY", g.block_z AS "BlkZ", g.registers AS "Reg/Trd",
               g.static_shared_bytes / 1e6 AS "StcSMem (MB)", g.dynamic_shared_bytes / 1e6 AS "DymSMem (MB)",
               g.bytes / 1e6 AS "Bytes (MB)",
               g.bytes * (1000000000 // nullif(g.end_ns - g.start_ns, 0)) / 1e6 AS "Throughput (MB/s)",
               g.src AS "SrcMemKd", g.dst AS "DstMemKd",
               CASE WHEN g.device IS NULL THEN NULL
                    ELSE coalesce(dev.name || ' ', '') || '(' || g.device || ')' END AS "Device",
               g.context AS "Ctx", NULL::BIGINT AS "GreenCtx", g.stream AS "Strm", g.name AS "Name"
        FROM g LEFT JOIN {device_name_sql(data)} dev ON dev.idx = g.device
        ORDER BY g.start_ns, g.rank, g.correlation_id, g.name""")
    mb = megabytes(3)
    formats = {c: mb for c in ("StcSMem (MB)", "DymSMem (MB)", "Bytes (MB)", "Throughput (MB/s)")}
    notes = [
        f"Start (ns) counts from {'the nsys session start' if 'origin_ns' in data.meta.clock else 'the profile start'}"
    ]
    return ReportResult(REPORT.name, REPORT.title, table, formats, notes)


REPORT = AnyOfReport(
    "cuda_gpu_trace",
    "CUDA GPU Trace",
    compute,
    needs=("kernels", "memcpy", "memset"),
    doc=(
        "every kernel, copy and set in start order with grid, block, registers, shared "
        "memory, bytes, throughput, memory kinds, device and stream"
    ),
)
