"""memcpy_sum: GPU copies by direction and memory kind, their bandwidth, and how much of their
time was hidden behind compute.

One row per (direction, source kind, destination kind), e.g. HtoD pageable -> device: count,
bytes, time, achieved bandwidth (bytes / copy time, GB/s = 1e9 bytes/s), and ``overlap_ms``: the
part of the copy time during which a compute kernel ran on the same GPU (on any stream), so the
copy cost no GPU time. Copies from or to pageable host memory are staged by the driver through a
pinned buffer and block the host; pinned memory allows asynchronous copies.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.gpu_work import gpu_work_sql, selected_sql
from ..core.intervals import covered_sql, union_sql
from ..core.report import Report, ReportResult, fixed, integer


def compute(data: ProfileData) -> ReportResult:
    work = gpu_work_sql(data)
    copies = f"""SELECT rank, coalesce(device, -1) AS device, start_ns, end_ns, bytes, copy_kind,
                        coalesce(src_kind, 'unknown') AS src_kind, coalesce(dst_kind, 'unknown') AS dst_kind
                 FROM ({selected_sql(data, "memcpy", launched=True)})"""
    if work is not None and data.has("kernels"):
        compute_islands = union_sql(f"SELECT * FROM ({work}) WHERE category = 'compute'", "rank, device")
        copies = covered_sql(copies, compute_islands, ("rank", "device"))
    else:
        copies = f"SELECT *, 0::BIGINT AS covered_ns FROM ({copies})"
    table = data.table(f"""
        SELECT copy_kind AS direction, src_kind, dst_kind, count(*) AS count, sum(bytes)::BIGINT AS bytes,
               sum(end_ns - start_ns)::BIGINT / 1e6 AS total_ms, avg(end_ns - start_ns) / 1e6 AS mean_ms,
               sum(bytes) / nullif(sum(end_ns - start_ns), 0) AS bandwidth_gbps,
               avg(bytes) AS mean_bytes,
               sum(covered_ns)::BIGINT / 1e6 AS overlap_ms,
               100.0 * sum(covered_ns) / nullif(sum(end_ns - start_ns), 0) AS overlap_pct
        FROM ({copies}) GROUP BY ALL ORDER BY total_ms DESC, direction, src_kind, dst_kind""")
    notes = [
        "bandwidth_gbps: bytes / copy time (1 GB/s = 1e9 bytes/s); overlap: copy time during which a compute "
        "kernel ran on the same GPU"
    ]
    rows = table.to_pylist()
    pageable = [r for r in rows if "pageable" in (r["src_kind"], r["dst_kind"])]
    if pageable:
        ms = sum(r["total_ms"] for r in pageable)
        notes.append(
            f"{sum(r['count'] for r in pageable)} copies ({ms:.3f} ms) use pageable host memory: they block "
            "the host and are staged through a pinned buffer"
        )
    if not rows:
        notes.append("no copies in the selected steps")
    return ReportResult("memcpy_sum", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "total_ms": fixed(3),
    "mean_ms": fixed(4),
    "bandwidth_gbps": fixed(2),
    "mean_bytes": fixed(0, True),
    "overlap_ms": fixed(3),
    "overlap_pct": fixed(1),
    "count": integer(True),
    "bytes": integer(True),
}

REPORT = Report(
    "memcpy_sum",
    "GPU copies: direction, memory kind, bandwidth, overlap",
    compute,
    needs=("memcpy",),
    doc=(
        "per copy direction and memory kind (pageable, pinned, device): count, bytes, time, achieved "
        "bandwidth and the share of copy time overlapped with compute kernels"
    ),
)
