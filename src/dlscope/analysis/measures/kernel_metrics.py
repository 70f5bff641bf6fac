"""The kernels Nsight Compute measured, with their time in the GPU windows.

Where ``dlscope ncu`` (or an imported ncu CSV) measured kernels, each kernel name of a rank that
also ran in the GPU windows gets its time per window and ncu's averages over its profiled
launches (:mod:`dlscope.analysis.reports.kernel_metrics`): SM and memory throughput as % of peak,
achieved occupancy, tensor pipe use, and ncu's Speed-Of-Light class: memory-bound,
compute-bound, or latency-bound when both are under ``LATENCY_PCT`` % of peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..reports.kernel_metrics import LATENCY_PCT, kernel_metrics_sql
from . import measured
from .basis import basis, in_gpu_windows


@dataclass(frozen=True)
class ProfiledKernel:
    """One rank's kernel name measured by ncu, with its time per GPU window."""

    kernel: str
    ms_per_step: float
    sm_pct: float
    memory_pct: float
    occupancy_pct: float | None
    tensor_pct: float | None
    bound: str  # 'memory', 'compute' or 'latency'


@measured
def profiled_kernels(data: ProfileData) -> tuple[ProfiledKernel, ...]:
    """The kernels with ncu's SM and memory throughput that ran in the GPU windows, longest first."""
    rows = data.rows(f"""
        WITH m AS ({kernel_metrics_sql()}),
             k AS (SELECT k.rank, k.name, sum(k.end_ns - k.start_ns)::DOUBLE
                 / 1e6 / {basis(data).windows} AS ms_per_step
                   FROM kernels k {in_gpu_windows(data, "k")} GROUP BY ALL)
        SELECT k.name AS kernel, k.ms_per_step, m.sm_pct, m.memory_pct, m.occupancy_pct, m.tensor_pct,
               CASE WHEN greatest(m.sm_pct, m.memory_pct) < {LATENCY_PCT} THEN 'latency'
                    WHEN m.memory_pct >= m.sm_pct THEN 'memory' ELSE 'compute' END AS bound
        FROM m JOIN k USING (rank, name)
        WHERE m.sm_pct IS NOT NULL AND m.memory_pct IS NOT NULL
        ORDER BY k.ms_per_step DESC""")
    return tuple(ProfiledKernel(**r) for r in rows)
