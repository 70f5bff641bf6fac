"""launch_sum: how the host fed the GPU: launch calls, launch delay, small kernels.

One row per runtime call name that enqueued GPU work (a kernel, copy or set linked to it by
correlation id, or a name with "launch" in it: ``cudaLaunchKernel``, ``cuLaunchKernel``,
``cudaGraphLaunch`` ...), and a last row ``all``:

* ``calls`` and their host-side duration (``total_ms``, ``mean_ms``, ``p50_ms``, ``p95_ms``,
  ``max_ms``);
* ``gpu_items`` / ``kernels`` launched, ``kernels_per_step`` (per selected step with GPU data);
* launch delay = GPU start of the work minus the start of the call that launched it:
  ``delay_mean_ms``, ``delay_p50_ms``, ``delay_p95_ms``, ``delay_max_ms``. A long delay means a
  deep queue (the host runs ahead: good); a delay near the call's own duration means the GPU was
  waiting for the launch;
* small kernels: kernels shorter than the median duration of the kernel-launch calls of the
  selection (what one launch costs the host; 5 us when the profile has no launch calls): the GPU
  finishes them faster than the host can launch them, so a run of them starves the GPU.
  ``small_kernels``, ``small_kernel_pct`` (of kernels), ``small_kernel_time_pct`` (of kernel time).

Percentiles interpolate linearly (numpy's default).

Checked against HTA's ``get_cuda_kernel_launch_stats`` in ``tests/test_hta_launch_stats.py``. HTA's
launch delay is measured from the *end* of the call and clipped at 0, and HTA takes four runtime
calls only (cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync, cudaMemsetAsync): the delay
here starts with the call, and every call that launched GPU work has a row (docs/hta.md).
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql, selected_sql
from ..core.report import Report, ReportResult, fixed, integer

DEFAULT_SMALL_KERNEL_NS = 5_000


def small_kernel_threshold_ns(data: ProfileData) -> tuple[int, bool]:
    """The host-side cost of one kernel launch: median duration of the selection's kernel-launch
    calls (API calls with "launch" in their name that launched a kernel), and whether it was
    measured (False: the default)."""
    v = data.scalar(f"""
        SELECT median(a.end_ns - a.start_ns) FROM ({selected_sql(data, "api")}) a
        SEMI JOIN kernels k ON k.rank = a.rank AND k.correlation_id = a.correlation_id
        WHERE lower(a.name) LIKE '%launch%'""")
    return (int(v), True) if v is not None and v > 0 else (DEFAULT_SMALL_KERNEL_NS, False)


def compute(data: ProfileData) -> ReportResult:
    work = gpu_work_sql(data) or (
        "SELECT NULL::INTEGER AS rank, NULL::BIGINT AS correlation_id, NULL AS kind, "
        "NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns WHERE FALSE"
    )
    small, measured = small_kernel_threshold_ns(data)
    steps = gpu_step_count(data)
    per_step = f"/ {steps}" if steps else "* NULL"
    table = data.table(f"""
        WITH g AS (SELECT rank, correlation_id, kind, start_ns, end_ns FROM ({work}) WHERE correlation_id IS NOT NULL),
             a AS (SELECT rank, correlation_id, name, start_ns, end_ns FROM ({selected_sql(data, "api")})),
             calls AS (SELECT a.* FROM a LEFT JOIN (SELECT DISTINCT rank, correlation_id FROM g) l
                         ON l.rank = a.rank AND l.correlation_id = a.correlation_id
                       WHERE l.correlation_id IS NOT NULL OR lower(a.name) LIKE '%launch%'),
             items AS (SELECT c.name, g.kind, g.start_ns - c.start_ns AS delay_ns, g.end_ns - g.start_ns AS dur_ns
                       FROM calls c JOIN g ON g.rank = c.rank AND g.correlation_id = c.correlation_id),
             per_call AS (
                SELECT coalesce(name, 'all') AS name, GROUPING(name) AS is_all, count(*) AS calls,
                       sum(end_ns - start_ns)::BIGINT / 1e6 AS total_ms, avg(end_ns - start_ns) / 1e6 AS mean_ms,
                       quantile_cont(end_ns - start_ns, 0.5) / 1e6 AS p50_ms,
                       quantile_cont(end_ns - start_ns, 0.95) / 1e6 AS p95_ms, max(end_ns - start_ns) / 1e6 AS max_ms
                FROM calls GROUP BY GROUPING SETS ((name), ())),
             per_item AS (
                SELECT coalesce(name, 'all') AS name, count(*) AS gpu_items,
                       count(*) FILTER (WHERE kind = 'kernel') AS kernels,
                       avg(delay_ns) / 1e6 AS delay_mean_ms, quantile_cont(delay_ns, 0.5) / 1e6 AS delay_p50_ms,
                       quantile_cont(delay_ns, 0.95) / 1e6 AS delay_p95_ms, max(delay_ns) / 1e6 AS delay_max_ms,
                       count(*) FILTER (WHERE kind = 'kernel' AND dur_ns < {small}) AS small_kernels,
                       coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel' AND dur_ns < {small}), 0) AS small_ns,
                       coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0) AS kernel_ns
                FROM items GROUP BY GROUPING SETS ((name), ()))
        SELECT c.name, c.calls, c.total_ms, c.mean_ms, c.p50_ms, c.p95_ms, c.max_ms,
               coalesce(i.gpu_items, 0) AS gpu_items, coalesce(i.kernels, 0) AS kernels,
               coalesce(i.kernels, 0) {per_step} AS kernels_per_step,
               i.delay_mean_ms, i.delay_p50_ms, i.delay_p95_ms, i.delay_max_ms,
               coalesce(i.small_kernels, 0) AS small_kernels,
               100.0 * i.small_kernels / nullif(i.kernels, 0) AS small_kernel_pct,
               100.0 * i.small_ns / nullif(i.kernel_ns, 0) AS small_kernel_time_pct
        FROM per_call c LEFT JOIN per_item i USING (name)
        ORDER BY c.is_all, c.total_ms DESC, c.name""")
    notes = [
        f"small kernels: shorter than {small / 1000:.1f} us (the median host time of one kernel launch"
        + (" in this selection)" if measured else ": none recorded, so the 5 us default)"),
        "delay: GPU start of the launched work minus the start of the launch call",
    ]
    if steps:
        notes.append(f"kernels_per_step: over {steps} selected step{'s' if steps != 1 else ''} with GPU data")
    return ReportResult("launch_sum", REPORT.title, table, FORMATS, notes)


FORMATS = {
    **{
        c: fixed(4)
        for c in (
            "total_ms",
            "mean_ms",
            "p50_ms",
            "p95_ms",
            "max_ms",
            "delay_mean_ms",
            "delay_p50_ms",
            "delay_p95_ms",
            "delay_max_ms",
        )
    },
    "kernels_per_step": fixed(1),
    "small_kernel_pct": fixed(1),
    "small_kernel_time_pct": fixed(1),
    "calls": integer(True),
    "gpu_items": integer(True),
    "kernels": integer(True),
    "small_kernels": integer(True),
}

REPORT = Report(
    "launch_sum",
    "Kernel launches: calls, delay, small kernels",
    compute,
    needs=("api", "kernels"),
    doc=(
        "per launch API: calls and duration, launch delay distribution, small kernels (shorter than "
        "one launch) and kernels per step"
    ),
)
