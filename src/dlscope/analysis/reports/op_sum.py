"""op_sum: per framework op name, its calls, CPU time and the GPU work it caused (torch.profiler's
``key_averages()``, computed from the tables).

* ``self_cpu_ms``: op duration minus its direct child ops (``ops.self_ns``); ``cpu_total_ms``:
  whole durations (an op nested in an op of the same name counts in both, as in torch).
* ``self_gpu_ms``, ``kernels``: kernels, copies and sets the op launched itself (linked by
  ``external_id``: the innermost op around the launch); ``gpu_total_ms``: also those its
  descendant ops launched (walking ``parent_id`` up from each launching op).
* ``input_shapes``: the most common input shapes of the calls, when shapes were recorded.

Ops of the selected steps (by start time); GPU work launched in them.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql, selected_sql
from ..core.report import Report, ReportResult, fixed, integer


def op_gpu_sql(data: ProfileData) -> str | None:
    """SQL: per launching op (rank, op_id): own_ns, own_kernels, total_ns (with descendants).
    None without GPU work. Links and nesting come from ``raw_ops`` (a key node re-derives steps,
    never parents; the decoded view would join strings on every step of the recursion)."""
    work = gpu_work_sql(data)
    if work is None:
        return None
    return f"""
    WITH RECURSIVE
        -- materialized once: joined against on every step of the recursion
        par AS MATERIALIZED (SELECT rank, op_id, parent_id FROM raw_ops WHERE parent_id IS NOT NULL),
        own AS (SELECT o.rank, o.op_id, sum(w.end_ns - w.start_ns)::BIGINT AS ns,
                       count(*) FILTER (WHERE w.kind = 'kernel') AS kernels
                FROM ({work}) w JOIN (SELECT rank, op_id, external_id FROM raw_ops) o
                  ON o.rank = w.rank AND o.external_id = w.external_id
                GROUP BY ALL),
        up(rank, op_id, ns) AS (
            SELECT rank, op_id, ns FROM own
            UNION ALL
            SELECT p.rank, p.parent_id, up.ns FROM up JOIN par p ON p.rank = up.rank AND p.op_id = up.op_id),
        total AS (SELECT rank, op_id, sum(ns)::BIGINT AS ns FROM up GROUP BY ALL)
    SELECT t.rank, t.op_id, coalesce(own.ns, 0) AS own_ns, coalesce(own.kernels, 0) AS own_kernels,
           t.ns AS total_ns
    FROM total t LEFT JOIN own USING (rank, op_id)"""


def compute(data: ProfileData) -> ReportResult:
    gpu = op_gpu_sql(data)
    gpu_join = f"LEFT JOIN ({gpu}) g USING (rank, op_id)" if gpu else ""

    def g(col: str) -> str:
        return f"coalesce(g.{col}, 0)" if gpu else "0"

    table = data.table(f"""
        WITH o AS (SELECT o.*, {g("own_ns")} AS own_ns, {g("own_kernels")} AS own_kernels, {g("total_ns")} AS total_ns
                   FROM ({selected_sql(data, "ops")}) o {gpu_join})
        SELECT name, count(*) AS calls,
               sum(coalesce(self_ns, end_ns - start_ns))::BIGINT / 1e6 AS self_cpu_ms,
               100.0 * sum(coalesce(self_ns, end_ns - start_ns))
                   / nullif(sum(sum(coalesce(self_ns, end_ns - start_ns))) OVER (), 0)
                   AS self_cpu_pct,
               sum(end_ns - start_ns)::BIGINT / 1e6 AS cpu_total_ms,
               avg(end_ns - start_ns) / 1e6 AS cpu_avg_ms,
               sum(own_ns)::BIGINT / 1e6 AS self_gpu_ms,
               100.0 * sum(own_ns) / nullif(sum(sum(own_ns)) OVER (), 0) AS self_gpu_pct,
               sum(total_ns)::BIGINT / 1e6 AS gpu_total_ms,
               sum(own_kernels)::BIGINT AS kernels,
               -- ordered: DuckDB's mode breaks ties by which thread's part merged first (the
               -- shapes shown changed from run to run); sorted input makes the tie-break fixed
               mode(input_shapes ORDER BY input_shapes) AS input_shapes,
               mode(source ORDER BY source) AS source
        FROM o GROUP BY name ORDER BY self_gpu_ms DESC, self_cpu_ms DESC, name""")
    notes = [] if table.num_rows else ["no ops in the selected steps"]
    if not gpu:
        table = table.drop_columns(["self_gpu_ms", "self_gpu_pct", "gpu_total_ms", "kernels"])
        notes.append("no GPU activity in the profile")
    else:
        unlinked = data.scalar(f"""SELECT sum(end_ns - start_ns)::BIGINT FROM ({gpu_work_sql(data)}) w
                                   ANTI JOIN raw_ops o ON o.rank = w.rank AND o.external_id = w.external_id""")
        if unlinked:
            notes.append(f"{unlinked / 1e6:.3f} ms of GPU work has no launching op and is not in this table")
    if table.num_rows and table.column("source").null_count == table.num_rows:
        table = table.drop_columns(["source"])
    elif table.num_rows:
        notes.append("source: where the op comes from (framework op path, program line), as the framework recorded it")
    if table.num_rows and table.column("input_shapes").null_count == table.num_rows:
        table = table.drop_columns(["input_shapes"])
    elif table.num_rows:
        notes.append("input_shapes: the most common shapes among the calls")
    steps = gpu_step_count(data)
    if steps:
        notes.append(
            f"totals over {steps} selected step{'s' if steps != 1 else ''} with detailed tracing "
            "(ops are recorded only there)"
        )
    notes.append(
        "self_cpu_ms excludes child ops; totals include them (an op nested in one of the same name counts "
        "twice in its total, as in torch.profiler)"
    )
    return ReportResult("op_sum", REPORT.title, table, FORMATS, notes)


FORMATS = {
    **{c: fixed(3) for c in ("self_cpu_ms", "cpu_total_ms", "cpu_avg_ms", "self_gpu_ms", "gpu_total_ms")},
    "self_cpu_pct": fixed(1),
    "self_gpu_pct": fixed(1),
    "calls": integer(True),
    "kernels": integer(True),
}

REPORT = Report(
    "op_sum",
    "Framework ops: CPU and GPU time",
    compute,
    needs=("ops",),
    doc=(
        "per op name: calls, self and total CPU time, GPU time it launched itself and with its "
        "child ops, kernels launched, most common input shapes"
    ),
)
