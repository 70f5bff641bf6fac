"""comm_sum: every kind and size of communication operation: how often, how long, how fast.

Bandwidths as nccl-tests defines them (its doc/PERFORMANCE.md): ``algbw = size / time``, with
``size`` the message nccl-tests reports (a rank's buffer; the whole gathered output for
allgather, the whole input for reducescatter), and ``busbw = algbw * factor``, the factor
making collectives comparable with the hardware's peak: allreduce ``2(n-1)/n``; allgather,
reducescatter and alltoall ``(n-1)/n``; broadcast, reduce and point-to-point 1, over the ``n``
ranks of the process group. ``time`` is the operation's mean duration as recorded (a GPU kernel,
or Gloo's worker thread), which includes waiting for late ranks: a straggler lowers bandwidth.
``transfer_us`` leaves the waits out: the same collective (the k-th of its kind in its process
group, the order NCCL and Gloo keep on every rank) lasts least on the rank that arrived last, which
waited for nobody; its median over the operations recorded on every rank of the group is the
collective's own time, comparable between runs whose ranks arrive in different orders.
Sizes come from the trace's collective arguments (recent PyTorch), or for Gloo from the input
shapes (recorded in full mode); without them bandwidth stays empty.
"""

from __future__ import annotations

import pyarrow as pa

from ...vocabulary.collectives import bus_factor_sql, size_bytes_sql
from ..core import comm_instances
from ..core.context import ProfileData
from ..core.report import Report, ReportResult, fixed, integer


def compute(data: ProfileData) -> ReportResult:
    rows = comm_instances.selected_numbered_sql(data)
    size = size_bytes_sql("name", "in_bytes", "out_bytes", "group_size")
    table = data.table(f"""
        WITH c AS (SELECT *, {size} AS size_bytes, {bus_factor_sql("name", "group_size")} AS factor FROM ({rows})),
             transfer AS (SELECT name, backend, "where", size_bytes, group_size,
                                 median(transfer_ns) AS transfer_ns
                          FROM ({comm_instances.transfer_sql(data, "SELECT * FROM c")}) GROUP BY ALL),
             summary AS (
        SELECT name AS operation, backend, "where", size_bytes, group_size AS ranks_in_group,
               count(DISTINCT rank) AS ranks_recorded, count(*) AS count,
               sum(end_ns - start_ns)::BIGINT / 1e6 AS total_ms,
               avg(end_ns - start_ns) / 1e3 AS mean_us, min(end_ns - start_ns) / 1e3 AS min_us,
               max(end_ns - start_ns) / 1e3 AS max_us,
               size_bytes / nullif(avg(end_ns - start_ns), 0) AS algbw_gbps,
               size_bytes / nullif(avg(end_ns - start_ns), 0) * any_value(factor) AS busbw_gbps
        FROM c GROUP BY name, backend, "where", size_bytes, group_size)
        SELECT s.*, t.transfer_ns / 1e3 AS transfer_us
        FROM summary s LEFT JOIN transfer t ON t.name = s.operation AND t.backend IS NOT DISTINCT FROM s.backend
             AND t."where" IS NOT DISTINCT FROM s."where" AND t.size_bytes IS NOT DISTINCT FROM s.size_bytes
             AND t.group_size IS NOT DISTINCT FROM s.ranks_in_group
        ORDER BY total_ms DESC, operation, size_bytes""")
    notes = [
        (
            "algbw = size / mean time, busbw = algbw x nccl-tests' factor (allreduce 2(n-1)/n; allgather, "
            "reducescatter, alltoall (n-1)/n; others 1); GB/s = 1e9 bytes/s; times include waits for late ranks"
        ),
        (
            "transfer_us: the median over the operations recorded on every rank of the group of the last-arriving "
            "rank's duration (the collective without waiting for late ranks)"
        ),
    ]
    if table.num_rows and all(v is None for v in table.column("size_bytes").to_pylist()):
        notes.append("the trace gives no message sizes (Gloo's come with input shapes: dlscope profile --mode full)")
    if not table.num_rows:
        notes.append("no communication in the selected steps")
        table = pa.table({"operation": pa.array([], pa.string())})
    return ReportResult("comm_sum", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "size_bytes": integer(True),
    "count": integer(True),
    "total_ms": fixed(3),
    "mean_us": fixed(1),
    "min_us": fixed(1),
    "max_us": fixed(1),
    "algbw_gbps": fixed(2),
    "busbw_gbps": fixed(2),
    "transfer_us": fixed(1),
}

REPORT = Report(
    "comm_sum",
    "Communication: operations, sizes, bandwidth",
    compute,
    needs=("comms",),
    doc="per collective kind and message size: count, time, algorithmic and bus bandwidth (nccl-tests' definitions)",
)
