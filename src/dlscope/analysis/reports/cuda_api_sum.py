"""cuda_api_sum: CUDA runtime and driver API calls by name, as ``nsys stats --report cuda_api_sum``.

Names follow nsys: CUPTI's ``_v`` + four-digit version suffix is dropped. Time (%) is each call's
share of all API time listed (host time spent in the calls, not GPU time).
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import api_name_sql, duration_formats, in_selection, scope_note, summary_sql
from ..core.report import Report, ReportResult


def compute(data: ProfileData) -> ReportResult:
    events = (
        f"SELECT {api_name_sql('a.name')} AS name, a.end_ns - a.start_ns AS d FROM api a "
        f"WHERE {in_selection(data, 'a')}"
    )
    table = data.table(summary_sql(events, "Num Calls", {"name": "Name"}, order='"Total Time (ns)" DESC, "Name"'))
    return ReportResult(REPORT.name, REPORT.title, table, duration_formats(), [scope_note(data)])


REPORT = Report(
    "cuda_api_sum",
    "CUDA API Summary",
    compute,
    needs=("api",),
    doc="CUDA API calls by name: share of API time, total, calls, avg/med/min/max/stddev (ns)",
)
