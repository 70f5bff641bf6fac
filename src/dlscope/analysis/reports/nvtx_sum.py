"""nvtx_sum: application ranges by name, as ``nsys stats --report nvtx_sum``.

Every range in ``phases`` counts: NVTX ranges, dlscope's own phases, record_function
annotations. Range is ``DOMAIN:NAME`` as nsys prints it (``:step`` in the default domain); Style
is PushPop for nested ranges and StartEnd for NVTX start/end ranges. Marks are not ranges and
are left out, and so are dlscope's own bookkeeping ranges, which are not part of the program: the
one around a whole profiled command (domain 'process') and those marking when detailed tracing
ran (domain 'trace').
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.nsys_conventions import duration_formats, in_selection, scope_note, summary_sql
from ..core.report import Report, ReportResult

BOOKKEEPING_DOMAINS = ("process", "trace")  # dlscope's own ranges (an NVTX domain of that name is kept)


def compute(data: ProfileData) -> ReportResult:
    events = f"""
        SELECT CASE WHEN p.style = 'startend' THEN 'StartEnd' ELSE 'PushPop' END AS style,
               coalesce(p.domain, '') || ':' || p.name AS name, p.end_ns - p.start_ns AS d
        FROM phases p
        WHERE p.kind = 'range' AND NOT (p.source <> 'nvtx' AND coalesce(p.domain, '') IN {BOOKKEEPING_DOMAINS})
          AND {in_selection(data, "p")}"""
    table = data.table(
        summary_sql(
            events, "Instances", {"style": "Style", "name": "Range"}, order='"Total Time (ns)" DESC, "Range", "Style"'
        )
    )
    return ReportResult(REPORT.name, REPORT.title, table, duration_formats(), [scope_note(data)])


REPORT = Report(
    "nvtx_sum",
    "NVTX Range Summary",
    compute,
    needs=("phases",),
    doc=(
        "NVTX ranges and dlscope phases by name: share of range time, total, instances, "
        "avg/med/min/max/stddev (ns), style"
    ),
)
