"""kernel_metrics: what Nsight Compute measured on the kernels it profiled, one row per kernel
name, and whether each is memory-bound, compute-bound or neither (latency-bound).

ncu names a metric differently on its two CSV pages (``Compute (SM) Throughput`` on the details
page, ``sm__throughput.avg.pct_of_peak_sustained_elapsed`` on the raw page): :data:`CANONICAL`
maps both to one column. Values are averaged over the profiled launches of a name.

* ``bound``: ncu's Speed-Of-Light rule (SOLBottleneck): a unit is the bottleneck when its
  throughput is the higher of compute (SM) and memory; when both stay under
  :data:`LATENCY_PCT` of peak, neither is saturated and the kernel is latency-bound (too little
  parallelism, stalls).
* Roofline position: ``flop_per_byte`` (arithmetic intensity: FP operations counted by ncu's
  SASS counters, FMA as 2, over DRAM bytes) and ``gflop_per_s`` achieved; with ``sm_pct`` and
  ``memory_pct`` (achieved as a share of peak) they place the kernel on the roofline. Tensor-core
  math is not in the SASS FP counters: ``tensor_pct`` (tensor pipe utilization) says how busy
  the tensor cores were.
* ``profile_ms`` / ``profile_pct``: the kernel's total time in the profile's kernels table (the
  join by name), so the table says how much of the GPU time each verdict covers.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.report import Report, ReportResult, fixed, integer

# The profile's note when `dlscope ncu` had ncu refuse the raw metrics it asked for first (its
# words follow): said where the roofline is missing.
NCU_REFUSED_NOTE = "dlscope ncu: ncu refused the raw metrics asked for first: "

# ncu's SOLBottleneck rule: under 60% of peak for both compute and memory the kernel does not
# saturate either unit ("latency issues"); Nsight Compute's documentation, Speed Of Light section.
LATENCY_PCT = 60.0

# dlscope column -> the metric names ncu uses for it (details page names, then raw names; a
# trailing '*' matches a prefix: the tensor pipe's metric name differs between GPU generations)
CANONICAL: dict[str, tuple[str, ...]] = {
    "duration_ns": ("Duration", "gpu__time_duration.sum"),
    "sm_pct": ("Compute (SM) Throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    "memory_pct": ("Memory Throughput", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
    "dram_pct": ("DRAM Throughput", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    "occupancy_pct": ("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    "theoretical_occupancy_pct": ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct"),
    "tensor_pct": (
        "sm__pipe_tensor*cycles_active.avg.pct_of_peak_sustained_active",
        "sm__inst_executed_pipe_tensor*.avg.pct_of_peak_sustained_active",
    ),
    "dram_bytes": ("dram__bytes.sum",),
}
# FP operations from SASS instruction counts: (metric prefix, operations per instruction)
FLOP_METRICS = tuple(
    (f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum", 2 if op == "fma" else 1)
    for p in ("d", "f", "h")
    for op in ("add", "mul", "fma")
)


def _match(col: str) -> str:
    """SQL condition: the metric is one of the names for ``col``."""
    conds = []
    for n in CANONICAL[col]:
        if n.endswith(".avg.pct_of_peak_sustained_active") and "*" in n:
            head, tail = n.split("*", 1)
            conds.append(f"(metric LIKE '{head}%' AND metric LIKE '%{tail}')")
        else:
            conds.append(f"metric = '{n}'")
    return " OR ".join(conds)


def kernel_metrics_sql() -> str:
    """SQL: per kernel name, the canonical metrics averaged over its profiled launches."""
    cols = ",\n".join(
        (
            f"avg(value) FILTER (WHERE {_match(c)}) AS {c}"
            if c != "tensor_pct"
            else f"max(value) FILTER (WHERE {_match(c)}) AS {c}"
        )
        for c in CANONICAL
    )
    flop_case = " ".join(f"WHEN '{m}' THEN {k}" for m, k in FLOP_METRICS)
    return f"""
    WITH per_launch AS (
        SELECT rank, name, launch, {cols},
               sum(value * CASE metric {flop_case} ELSE 0 END) AS flops,
               count(*) FILTER (WHERE metric IN ({", ".join(f"'{m}'" for m, _ in FLOP_METRICS)})) AS flop_metrics
        FROM kernel_metrics GROUP BY rank, name, launch)
    SELECT rank, name, count(*) AS launches, {", ".join(f"avg({c}) AS {c}" for c in CANONICAL if c != "dram_bytes")},
           avg(dram_bytes) AS dram_bytes,
           avg(flops) FILTER (WHERE flop_metrics > 0) AS flops
    FROM per_launch GROUP BY rank, name"""


def compute(data: ProfileData) -> ReportResult:
    have_kernels = data.has("kernels")
    prof = (
        "LEFT JOIN (SELECT rank, name, ns, sum(ns) OVER (PARTITION BY rank) AS all_ns FROM "
        "(SELECT rank, name, sum(end_ns - start_ns)::BIGINT AS ns FROM kernels GROUP BY rank, name)) k "
        "USING (rank, name)"
        if have_kernels
        else ""
    )
    table = data.table(f"""
        WITH m AS ({kernel_metrics_sql()})
        SELECT m.name, m.launches,
               {"k.ns / 1e6" if have_kernels else "NULL::DOUBLE"} AS profile_ms,
               {"100.0 * k.ns / nullif(k.all_ns, 0)" if have_kernels else "NULL::DOUBLE"} AS profile_pct,
               m.duration_ns / 1e6 AS ncu_ms,
               m.sm_pct, m.memory_pct, m.dram_pct, m.occupancy_pct, m.theoretical_occupancy_pct, m.tensor_pct,
               m.flops / nullif(m.dram_bytes, 0) AS flop_per_byte,
               m.flops / nullif(m.duration_ns, 0) AS gflop_per_s,
               CASE WHEN m.sm_pct IS NULL OR m.memory_pct IS NULL THEN NULL
                    WHEN greatest(m.sm_pct, m.memory_pct) < {LATENCY_PCT} THEN 'latency'
                    WHEN m.memory_pct >= m.sm_pct THEN 'memory' ELSE 'compute' END AS bound
        FROM m {prof}
        ORDER BY profile_ms DESC NULLS LAST, ncu_ms DESC NULLS LAST, m.name""")
    notes = [
        "bound: the higher of compute (SM) and memory throughput, as a share of peak; 'latency' when both "
        f"are under {LATENCY_PCT:.0f}% (ncu's Speed-Of-Light rule)"
    ]
    if have_kernels:
        missing = table.filter(table.column("profile_ms").is_null()).num_rows
        if missing:
            notes.append(
                f"{missing} profiled kernel name(s) are not in this profile's kernels table "
                "(ncu demangles names unless told --print-kernel-base mangled)"
            )
    else:
        notes.append("the profile has no kernels of its own: profile_ms/profile_pct are empty")
    if table.num_rows and table.column("flop_per_byte").null_count == table.num_rows:
        table = table.drop_columns(["flop_per_byte", "gflop_per_s"])
        refused = next((n[len(NCU_REFUSED_NOTE) :] for n in data.meta.notes if n.startswith(NCU_REFUSED_NOTE)), None)
        notes.append(
            "no roofline position: ncu did not measure FP instruction counts and DRAM bytes "
            + (
                f"(ncu refused them: {refused})"
                if refused
                else "(dlscope ncu asks for them; an ncu CSV imported without --metrics has none)"
            )
        )
    return ReportResult("kernel_metrics", REPORT.title, table, FORMATS, notes)


FORMATS = {
    "launches": integer(True),
    "profile_ms": fixed(3),
    "profile_pct": fixed(1),
    "ncu_ms": fixed(3),
    **{
        c: fixed(1)
        for c in ("sm_pct", "memory_pct", "dram_pct", "occupancy_pct", "theoretical_occupancy_pct", "tensor_pct")
    },
    "flop_per_byte": fixed(2),
    "gflop_per_s": fixed(1),
}

REPORT = Report(
    "kernel_metrics",
    "Nsight Compute metrics of the profiled kernels",
    compute,
    needs=("kernel_metrics",),
    doc=(
        "per kernel ncu profiled: SM, memory and DRAM throughput (% of peak), achieved occupancy, "
        "tensor pipe utilization, arithmetic intensity and FLOP/s, memory-, compute- or latency-bound, "
        "and its share of the profile's GPU time"
    ),
)
