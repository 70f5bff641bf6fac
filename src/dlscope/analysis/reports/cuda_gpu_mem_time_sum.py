"""cuda_gpu_mem_time_sum: GPU copies and sets by operation and time, as
``nsys stats --report cuda_gpu_mem_time_sum`` (``[CUDA memcpy Host-to-Device]``, ``[CUDA memset]``)."""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import AnyOfReport, duration_formats, memops_sql, scope_note, summary_sql
from ..core.report import ReportResult


def compute(data: ProfileData) -> ReportResult:
    table = data.table(
        summary_sql(memops_sql(data), "Count", {"name": "Operation"}, order='"Total Time (ns)" DESC, "Operation"')
    )
    return ReportResult(REPORT.name, REPORT.title, table, duration_formats(), [scope_note(data)])


REPORT = AnyOfReport(
    "cuda_gpu_mem_time_sum",
    "CUDA GPU MemOps Summary (by Time)",
    compute,
    needs=("memcpy", "memset"),
    doc="memory copies and sets by kind: share of their time, total, count, avg/med/min/max/stddev (ns)",
)
