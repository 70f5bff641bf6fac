"""idle_breakdown_hta: the idle time between consecutive GPU operations of each stream, split into
Holistic Trace Analysis' categories: host wait, kernel wait, other.

dlscope's own :mod:`.idle_sum` names other causes on purpose (what the host was doing while the
whole device sat idle); this report gives HTA's breakdown as HTA defines it, per stream, so that
numbers from an HTA workflow can be read off a dlscope profile.

Definitions (HTA 0.5.0, ``hta/analyzers/breakdown_analysis.py``: ``BreakdownAnalysis.get_idle_time_breakdown``
selects the GPU operations and links them to their launch, ``BreakdownAnalysis._analyze_idle_time_for_stream``
classifies; ``hta/trace_analysis.py``: ``TraceAnalysis.get_idle_time_breakdown`` documents them):

* the operations of a stream are its kernels, copies and sets (HTA: GPU events of category
  kernel, gpu_memcpy, gpu_memset or mtia_ccp_events; synchronization records are left out),
  ordered by start;
* the **idle interval** before an operation is its start minus the end of the operation before it
  in that order (the stream's first operation has none). It is not clipped: where operations of
  one stream overlap, it is negative, and HTA adds it as it is;
* **host wait**: the launch call of the operation (linked by correlation id) started after the
  previous operation ended: the host had not enqueued it in time;
* **kernel wait**: otherwise, an interval shorter than ``consecutive_kernel_delay`` (HTA's default
  30, in the trace's time unit: 30 us for Kineto traces, although HTA's docstring says
  nanoseconds): the overhead between back-to-back launches;
* **other**: every other interval (a wait on another stream or event, an operation whose launch
  is not recorded ...).

Columns: ``idle_ms`` (the category's sum of intervals), ``idle_pct`` (its share of the stream's
idle time: HTA's ``idle_time_ratio`` x 100), ``intervals`` (how many intervals fell in it).

Comparison with HTA: ``tests/data/hta/idle_time_breakdown.json``
(``tests/data/hta/make_idle_time_reference.py``) and ``tests/test_hta_idle_time.py``.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql
from ..core.report import Report, ReportResult, fixed, integer

CATEGORIES = ("host_wait", "kernel_wait", "other")
CONSECUTIVE_KERNEL_DELAY_NS = 30_000  # HTA's consecutive_kernel_delay=30 in a Kineto trace's us
KEYS = "rank, stream"


def intervals_sql(data: ProfileData, work: str, delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS) -> str:
    """SQL: one row per GPU operation after the first of its stream: rank, device, stream,
    start_ns, interval_ns (start minus the previous operation's end) and category."""
    launched = "NULL::BIGINT"
    join = ""
    if data.has("api"):
        launched = "a.start_ns"
        join = """LEFT JOIN (SELECT rank, correlation_id, min(start_ns) AS start_ns FROM raw_api
                             WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                    ON a.rank = w.rank AND a.correlation_id = w.correlation_id"""
    return f"""
    WITH o AS (SELECT w.rank, w.device, w.stream, w.start_ns, w.end_ns, {launched} AS launch_ns,
                      lag(w.end_ns) OVER (PARTITION BY w.rank, w.stream
                                          ORDER BY w.start_ns, w.end_ns, w.correlation_id) AS prev_end_ns
               FROM ({work}) w {join} WHERE w.stream IS NOT NULL)
    SELECT rank, device, stream, start_ns, start_ns - prev_end_ns AS interval_ns,
           CASE WHEN launch_ns > prev_end_ns THEN 'host_wait'
                WHEN start_ns - prev_end_ns < {int(delay_ns)} THEN 'kernel_wait' ELSE 'other' END AS category
    FROM o WHERE prev_end_ns IS NOT NULL"""


def compute(data: ProfileData, delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS) -> ReportResult:
    work = gpu_work_sql(data)
    if work is None:
        return ReportResult(
            "idle_breakdown_hta",
            REPORT.title,
            pa.table({"category": pa.array([], pa.string())}),
            FORMATS,
            ["the profile has no GPU activity"],
        )
    cats = ", ".join(f"('{c}', {i})" for i, c in enumerate(CATEGORIES))
    table = data.table(f"""
        WITH w AS MATERIALIZED ({work}),
             i AS MATERIALIZED ({intervals_sql(data, "SELECT * FROM w", delay_ns)}),
             streams AS (SELECT rank, stream, min(device) AS device FROM w WHERE stream IS NOT NULL GROUP BY ALL),
             c AS (SELECT s.*, v.category, v.ord FROM streams s, (VALUES {cats}) v(category, ord)),
             per AS (SELECT c.rank, c.device, c.stream, c.category, c.ord,
                 coalesce(sum(i.interval_ns), 0)::BIGINT AS ns,
                            count(i.interval_ns) AS intervals
                     FROM c LEFT JOIN i ON i.rank = c.rank AND i.stream = c.stream AND i.category = c.category
                     GROUP BY ALL)
        SELECT rank, device, stream, category, ns / 1e6 AS idle_ms,
               100.0 * ns / nullif(sum(ns) OVER (PARTITION BY rank, stream), 0) AS idle_pct, intervals
        FROM per ORDER BY rank, stream, ord""")
    notes = [
        (
            "HTA's idle time breakdown, per stream: the interval before each GPU operation (its start minus the "
            "previous operation's end on the stream) is host_wait when its launch call started after that end, "
            f"else kernel_wait when shorter than {delay_ns / 1000:g} us, else other"
        ),
        "idle_pct: share of the stream's idle time; dlscope's own causes of idle time: --report idle_sum",
    ]
    if not data.has("api"):
        notes.append("the profile has no runtime calls: no interval can be a host wait")
    n = gpu_step_count(data)
    if n is not None:
        notes.append(f"GPU work launched in {n} selected step{'s' if n != 1 else ''}")
    return ReportResult("idle_breakdown_hta", REPORT.title, table, FORMATS, notes)


FORMATS = {"idle_ms": fixed(3), "idle_pct": fixed(1), "intervals": integer(True)}

REPORT = Report(
    "idle_breakdown_hta",
    "GPU idle time per stream: HTA's host wait, kernel wait, other",
    compute,
    needs=("kernels",),
    doc=(
        "per rank and stream: the idle intervals between GPU operations split as HTA's idle time "
        "breakdown does (host wait, kernel wait, other)"
    ),
)
