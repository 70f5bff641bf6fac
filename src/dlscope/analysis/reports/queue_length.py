"""queue_length: how much GPU work the host had queued on each stream (HTA's queue length), and
the time a stream's launch queue was full.

Definitions (Holistic Trace Analysis 0.5.0, ``hta/analyzers/trace_counters.py``,
``TraceCounters._get_queue_length_time_series_for_rank``, ``get_queue_length_summary_from_time_series``
and ``get_time_spent_blocked_on_full_queue``):

* the **queue length** of a stream is the number of GPU operations launched on it and not yet
  started: it goes up by one at the *start* of each launch call (``cudaLaunchKernel``,
  ``cudaLaunchKernelExC``, ``cuLaunchKernel``, ``cudaMemcpyAsync``, ``cudaMemsetAsync``, their HIP
  twins and MTIA's submit: :data:`LAUNCH_CALLS`) that is linked by correlation id to a kernel,
  copy or set, and down by one at the *start* of that GPU operation. Calls of other names
  (``cudaGraphLaunch``, a synchronous ``cudaMemcpy``) and their GPU work are left out, as HTA does;
* the series is the value after each of those events, in time order, per rank and stream; the
  summary is over those values, one per event, not weighted by time (pandas' ``describe()``):
  ``events``, ``mean``, ``std`` (sample), ``min``, ``p25``, ``p50``, ``p75``, ``max``, with
  percentiles interpolated linearly;
* **blocked**: the time the series spent at or above the launch queue's capacity, HTA's
  ``CUDA_MAX_LAUNCH_QUEUE_PER_STREAM`` = 1024 (``hta/common/constants.py``): each event at or
  above it counts until the next event of the stream. Past that length a launch call blocks the
  host until the GPU starts work. ``blocked_pct``: share of the rank's span (first to last
  event start of the launches and GPU work counted here; HTA divides by its whole trace's span,
  CPU events included, so its share is smaller where the host ran before or after the GPU work).

Unlike HTA, which keeps one row per rank (the last stream it looked at, where a rank has several
streams at the capacity), every stream gets its row here.

Events at the same instant on one stream are ordered GPU start first, then launch. HTA's order
there is an artifact: it sorts the merged launches and GPU starts with pandas' default sort
(numpy's unstable quicksort), so a launch and a start at one instant come out either way (about
half each on HTA's corpus), and it compares times as the trace's microseconds parsed to float64,
whose step is 0.25 us for stamps since the epoch (finer where the trace's stamps are relative
to its baseTimeNanoseconds): in a trace with ns epoch stamps, events up to 0.25 us apart become
such ties there. Only the order within an instant differs (the value after each instant,
hence the blocked time, does not): ``tests/test_hta_queue_length.py`` bounds HTA's statistics by
both orders. Another artifact of HTA not copied here: a GPU operation that is the very first
event of its trace file gets index 0, which HTA's ``index_correlation > 0`` takes for "no linked
event", so HTA leaves it and its launch out.

Comparison with HTA: ``tests/data/hta/queue_length.json`` (``tests/data/hta/make_queue_length_reference.py``)
and ``tests/test_hta_queue_length.py``.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql, selected_sql
from ..core.report import Report, ReportResult, fixed, integer

# HTA's TraceSymbolTable.get_runtime_launch_events_query (hta/common/trace_symbol_table.py)
LAUNCH_CALLS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
    "hipLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipMemsetAsync",
    "hipMemcpyAsync",
    "hipMemcpyWithStream",
)
MAX_QUEUE_LENGTH = 1024  # HTA's CUDA_MAX_LAUNCH_QUEUE_PER_STREAM
KEYS = "rank, stream"


def series_sql(data: ProfileData, work: str) -> str:
    """SQL: the queue-length series, one row per event: rank, device, stream, ts_ns, delta (+1 a
    launch, -1 a GPU start), correlation_id (the launch's), queue_length (after the event) and
    dur_ns (until the stream's next event; NULL for the last)."""
    names = ", ".join(f"'{n}'" for n in LAUNCH_CALLS)
    order = f"PARTITION BY {KEYS} ORDER BY ts_ns, delta, correlation_id"
    return f"""
    WITH g AS (SELECT rank, device, stream, start_ns, correlation_id FROM ({work})
               WHERE correlation_id IS NOT NULL AND stream IS NOT NULL),
         a AS (SELECT rank, correlation_id, start_ns FROM ({selected_sql(data, "api")})
               WHERE correlation_id IS NOT NULL AND name IN ({names})),
         ev AS (SELECT g.rank, g.device, g.stream, a.start_ns AS ts_ns, 1 AS delta, g.correlation_id
                FROM a JOIN g ON g.rank = a.rank AND g.correlation_id = a.correlation_id
                UNION ALL
                SELECT g.rank, g.device, g.stream, g.start_ns, -1, g.correlation_id
                FROM g JOIN a ON g.rank = a.rank AND g.correlation_id = a.correlation_id)
    SELECT rank, device, stream, ts_ns, delta, correlation_id,
           -- BIGINT: DuckDB's sum of integers is a HUGEINT, which reaches Python as a Decimal
           (sum(delta) OVER ({order} ROWS UNBOUNDED PRECEDING))::BIGINT AS queue_length,
           lead(ts_ns) OVER ({order}) - ts_ns AS dur_ns
    FROM ev"""


def summary_sql(data: ProfileData, work: str, max_queue_length: int = MAX_QUEUE_LENGTH) -> str:
    """SQL: per rank and stream, the summary of the series and the time at ``max_queue_length``
    or more (blocked_ns)."""
    return f"""
    WITH s AS MATERIALIZED ({series_sql(data, work)}),
         span AS (SELECT rank, max(ts_ns) - min(ts_ns) AS span_ns FROM s GROUP BY rank)
    SELECT rank, min(device) AS device, stream, count(*) AS events, avg(queue_length) AS mean,
           stddev_samp(queue_length) AS std, min(queue_length) AS min,
           quantile_cont(queue_length, 0.25) AS p25, quantile_cont(queue_length, 0.5) AS p50,
           quantile_cont(queue_length, 0.75) AS p75, max(queue_length) AS max,
           coalesce(sum(dur_ns) FILTER (WHERE queue_length >= {int(max_queue_length)}), 0)::BIGINT AS blocked_ns,
           any_value(span.span_ns) AS span_ns
    FROM s JOIN span USING (rank) GROUP BY rank, stream"""


def compute(data: ProfileData, max_queue_length: int = MAX_QUEUE_LENGTH) -> ReportResult:
    work = gpu_work_sql(data)
    if work is None or not data.has("api"):
        why = "the profile has no GPU activity" if work is None else "the profile has no runtime calls"
        return ReportResult(
            "queue_length", REPORT.title, pa.table({"stream": pa.array([], pa.int64())}), FORMATS, [why]
        )
    table = data.table(f"""
        SELECT rank, device, stream, events, mean, std, min, p25, p50, p75, max,
               blocked_ns / 1e6 AS blocked_ms, 100.0 * blocked_ns / nullif(span_ns, 0) AS blocked_pct
        FROM ({summary_sql(data, work, max_queue_length)}) ORDER BY rank, stream""")
    notes = [
        (
            "queue length: GPU operations launched on the stream and not yet started (+1 at the start of a "
            f"launch call, -1 at the start of its kernel, copy or set; calls: {', '.join(LAUNCH_CALLS[:5])} "
            "and their HIP twins); statistics over the value after each such event, unweighted (HTA's)"
        ),
        (
            f"blocked: time at {max_queue_length} or more queued operations (the launch queue's capacity): "
            "launch calls block the host; blocked_pct: share of the rank's span of those events"
        ),
    ]
    n = gpu_step_count(data)
    if n is not None:
        notes.append(f"GPU work launched in {n} selected step{'s' if n != 1 else ''}")
    if not table.num_rows:
        notes.append("no launch call linked to GPU work in the selection")
    return ReportResult("queue_length", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "events": integer(True),
    "mean": fixed(2),
    "std": fixed(2),
    "min": integer(),
    "p25": fixed(2),
    "p50": fixed(2),
    "p75": fixed(2),
    "max": integer(),
    "blocked_ms": fixed(3),
    "blocked_pct": fixed(2),
}

REPORT = Report(
    "queue_length",
    "Launch queue length per stream (HTA's)",
    compute,
    needs=("api", "kernels"),
    doc=(
        "per rank and stream: GPU operations launched and not yet started (mean, percentiles, max) "
        "and the time the launch queue was full (HTA's queue length summary and blocked time)"
    ),
)
