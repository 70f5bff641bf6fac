"""cuda_gpu_mem_size_sum: GPU copies and sets by operation and size, as
``nsys stats --report cuda_gpu_mem_size_sum``. Sizes are MB (10^6 bytes); the table keeps them
unrounded, the text has nsys's three decimals."""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import AnyOfReport, megabytes, memops_sql, scope_note
from ..core.report import ReportResult

MB_COLUMNS = ("Total (MB)", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)")


def compute(data: ProfileData) -> ReportResult:
    table = data.table(f"""
        WITH ev AS ({memops_sql(data)})
        SELECT sum(bytes)::DOUBLE / 1e6 AS "Total (MB)", count(*) AS "Count",
               sum(bytes)::DOUBLE / count(*) / 1e6 AS "Avg (MB)", quantile_cont(bytes, 0.5) / 1e6 AS "Med (MB)",
               min(bytes) / 1e6 AS "Min (MB)", max(bytes) / 1e6 AS "Max (MB)",
               coalesce(stddev_samp(bytes), 0.0) / 1e6 AS "StdDev (MB)", name AS "Operation"
        FROM ev GROUP BY name
        ORDER BY sum(bytes) DESC, name""")
    fmt = megabytes(3)
    return ReportResult(REPORT.name, REPORT.title, table, {c: fmt for c in MB_COLUMNS}, [scope_note(data)])


REPORT = AnyOfReport(
    "cuda_gpu_mem_size_sum",
    "CUDA GPU MemOps Summary (by Size)",
    compute,
    needs=("memcpy", "memset"),
    doc="memory copies and sets by kind: total, count, avg/med/min/max/stddev size (MB)",
)
