"""collective_overlap: each collective's own time, and how much of it compute hid, job-wide.

``overlap`` measures per rank, and a rank's collectives include waiting for the ranks that arrive
later; an early rank's transfer also comes after its compute is done. Which rank arrives last
changes from run to run, so per-rank overlap changes with it. Here every collective is taken on
the rank that arrived last (its shortest record across the group's ranks: that rank waited for
nobody, :mod:`dlscope.analysis.core.comm_instances`), and its overlap with that rank's compute kernels
is counted: what the job's communication costs where it cannot be hidden, the same for two runs
of one job whatever their arrival order. Per operation and message size, and for all together.

Checked on 2 H100s: the DDP job launched as two hosts and merged, against the same job in one
launch: 64.6% and 65.9% overlapped (exposed 3.50 and 3.39 ms over 10 steps;
``tests/test_merge.py``); per rank, the exposed time differed 8x.
"""

from __future__ import annotations

import pyarrow as pa

from ...vocabulary.collectives import size_bytes_sql
from ..core import comm_instances
from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql
from ..core.intervals import union_sql
from ..core.report import Report, ReportResult, fixed, integer

ALL = "(all)"


def compute(data: ProfileData) -> ReportResult:
    empty = pa.table({"operation": pa.array([], pa.string())})
    gpu = gpu_work_sql(data)
    if gpu is None:
        return ReportResult("collective_overlap", REPORT.title, empty, FORMATS, ["no GPU kernels"])
    size = size_bytes_sql("name", "in_bytes", "out_bytes", "group_size")
    n = gpu_step_count(data)
    per_step = f"/ {n}" if n else "* NULL"
    table = data.table(f"""
        WITH last_in AS (
                SELECT rank, name, {size} AS size_bytes, start_ns, end_ns
                FROM ({comm_instances.transfer_sql(data)})
                WHERE "where" = 'gpu' AND end_ns - start_ns = transfer_ns
                QUALIFY row_number() OVER (PARTITION BY group_name, backend, name, nth_ ORDER BY rank) = 1),
             islands AS ({union_sql(f"SELECT rank, start_ns, end_ns FROM ({gpu}) WHERE category = 'compute'", "rank")}),
             hidden AS (
                SELECT l.name, l.size_bytes, l.start_ns, l.end_ns,
                       -- (least() and greatest() skip NULLs: an unmatched row must count 0, not its length)
                       coalesce(sum(CASE WHEN i.start_ns IS NOT NULL THEN
                                    least(l.end_ns, i.end_ns) - greatest(l.start_ns, i.start_ns) END), 0) AS hidden_ns
                FROM last_in l LEFT JOIN islands i
                  ON i.rank = l.rank AND i.start_ns < l.end_ns AND i.end_ns > l.start_ns
                GROUP BY l.rank, l.name, l.size_bytes, l.start_ns, l.end_ns),
             rows AS (
                SELECT coalesce(name, '{ALL}') AS operation, size_bytes, count(*) AS count,
                       sum(end_ns - start_ns)::DOUBLE AS ns, sum(hidden_ns)::DOUBLE AS hidden_ns,
                       grouping(name, size_bytes) AS g
                FROM hidden GROUP BY GROUPING SETS ((name, size_bytes), ()))
        SELECT operation, size_bytes, count, ns / 1e6 AS transfer_ms, hidden_ns / 1e6 AS overlapped_ms,
               (ns - hidden_ns) / 1e6 AS exposed_ms, 100.0 * hidden_ns / nullif(ns, 0) AS overlap_pct,
               (ns - hidden_ns) / 1e6 {per_step} AS exposed_ms_per_step
        FROM rows WHERE count > 0 ORDER BY g, exposed_ms DESC, operation, size_bytes""")
    if not table.num_rows:
        return ReportResult(
            "collective_overlap",
            REPORT.title,
            empty,
            FORMATS,
            ["no GPU collective recorded on every rank of its group"],
        )
    notes = [
        "each collective on the rank that arrived last (its shortest record across the group: it waited for "
        "nobody), against that rank's compute kernels; comparable between runs whatever the order of arrival"
    ]
    if n:
        notes.append(f"per step: over {n} step{'s' if n != 1 else ''} with detailed tracing")
    return ReportResult("collective_overlap", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "size_bytes": integer(True),
    "count": integer(True),
    "transfer_ms": fixed(3),
    "overlapped_ms": fixed(3),
    "exposed_ms": fixed(3),
    "overlap_pct": fixed(2),
    "exposed_ms_per_step": fixed(3),
}

REPORT = Report(
    "collective_overlap",
    "Collectives without the waits: their own time and how much compute hid",
    compute,
    needs=("comms",),
    needs_ranks=2,
    doc=(
        "job-wide, per operation and size: each collective on the rank that arrived last, its time "
        "and the part under that rank's compute (run-to-run comparable, unlike per-rank overlap)"
    ),
)
