"""tensor_core: per op, how much of its GPU time ran on tensor cores (DLProf's tensor-core report).

Each kernel belongs to the op that launched it (the innermost framework op, by ``external_id``);
kernels with no op are gathered under ``(no op)``. Per op name: ``calls`` (instances that launched
kernels), tensor-core and other kernel time and counts, TC utilization (tensor-core share of the
op's kernel time), whether the op is tensor-core eligible (a GEMM, convolution or attention op)
and whether it used tensor cores at all.
Which kernel uses tensor cores is decided by :mod:`.tensor_cores` from kernel names.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import selected_sql
from ..core.report import Report, ReportResult, fixed, integer
from ..core.tensor_core_kernels import eligible_op_sql, tensor_core_sql

NO_OP = "(no op)"


def kernels_with_ops_sql(data: ProfileData) -> str:
    """SQL: the selected kernels with ``tc`` (bool), ``op_name`` and ``op_id`` of their launching op."""
    op_join = (
        "LEFT JOIN ops o ON o.rank = k.rank AND o.external_id = k.external_id"
        if data.has("ops")
        else (
            "LEFT JOIN (SELECT NULL::INTEGER AS rank, NULL::BIGINT AS external_id, "
            "NULL::VARCHAR AS name, NULL::BIGINT AS op_id) o ON FALSE"
        )
    )
    return f"""SELECT k.rank, k.start_ns, k.end_ns, k.name, {tensor_core_sql("k.name")} AS tc,
                      o.name AS op_name, o.op_id
               FROM ({selected_sql(data, "kernels", launched=True)}) k {op_join}"""


def compute(data: ProfileData) -> ReportResult:
    table = data.table(f"""
        WITH k AS ({kernels_with_ops_sql(data)})
        SELECT coalesce(op_name, '{NO_OP}') AS op,
               count(DISTINCT (rank, op_id)) FILTER (WHERE op_id IS NOT NULL) AS calls,
               count(*) AS kernels,
               count(*) FILTER (WHERE tc) AS tc_kernels,
               count(*) FILTER (WHERE NOT tc) AS non_tc_kernels,
               sum(end_ns - start_ns)::BIGINT / 1e6 AS gpu_ms,
               coalesce(sum(end_ns - start_ns) FILTER (WHERE tc), 0)::BIGINT / 1e6 AS tc_gpu_ms,
               coalesce(sum(end_ns - start_ns) FILTER (WHERE NOT tc), 0)::BIGINT / 1e6 AS non_tc_gpu_ms,
               100.0 * coalesce(sum(end_ns - start_ns) FILTER (WHERE tc), 0) / nullif(sum(end_ns - start_ns), 0)
                   AS tc_pct,
               op_name IS NOT NULL AND {eligible_op_sql("op_name")} AS eligible,
               count(*) FILTER (WHERE tc) > 0 AS using_tc
        FROM k GROUP BY op_name ORDER BY gpu_ms DESC, op""")
    return ReportResult("tensor_core", REPORT.title, table, FORMATS, _notes(data, table))


def _notes(data: ProfileData, table: pa.Table) -> list[str]:
    rows = table.to_pylist()
    notes = [
        "tensor-core use judged from kernel names (patterns in dlscope.analysis.core.tensor_core_kernels); "
        "tc_pct = tensor-core share of the op's kernel time"
    ]
    total = sum(r["gpu_ms"] for r in rows)
    if not total:
        notes.append("no kernels in the selected steps")
        return notes
    tc = sum(r["tc_gpu_ms"] for r in rows)
    notes.append(f"tensor-core kernel utilization: {100 * tc / total:.1f}% of all kernel time")
    elig = [r for r in rows if r["eligible"]]
    if elig:
        e_total = sum(r["gpu_ms"] for r in elig)
        e_tc = sum(r["tc_gpu_ms"] for r in elig)
        notes.append(
            f"eligible ops: {100 * e_tc / e_total:.1f}% of their kernel time on tensor cores"
            if e_total
            else "eligible ops launched no timed kernels"
        )
        missing = [r["op"] for r in elig if not r["using_tc"]]
        if missing:
            notes.append(
                f"eligible ops that used no tensor-core kernel: {', '.join(missing[:5])}"
                + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            )
    gpm = gpm_tensor_active(data)
    if gpm is not None:
        notes.append(
            f"GPM tensor activity (sampled, a second opinion on the kernel names): mean {gpm:.1f}% "
            "over the selected steps"
        )
    return notes


def gpm_tensor_active(data: ProfileData) -> float | None:
    """Mean of the GPM ``tensor_active`` samples (%) in the selected steps (all samples without
    steps); None when the profile has none."""
    if not data.has("counters"):
        return None
    v = data.scalar(f"SELECT avg(value) FROM ({selected_sql(data, 'counters')}) WHERE metric = 'tensor_active'")
    return None if v is None else float(v)


FORMATS = {
    "gpu_ms": fixed(3),
    "tc_gpu_ms": fixed(3),
    "non_tc_gpu_ms": fixed(3),
    "tc_pct": fixed(1),
    "kernels": integer(True),
    "tc_kernels": integer(True),
    "non_tc_kernels": integer(True),
    "calls": integer(True),
}

REPORT = Report(
    "tensor_core",
    "Tensor-core use per op",
    compute,
    needs=("kernels",),
    doc=(
        "per op: tensor-core and other kernel time and counts, TC utilization, eligibility "
        "(GEMM, convolution, attention), from kernel names; GPM tensor activity when sampled"
    ),
)
