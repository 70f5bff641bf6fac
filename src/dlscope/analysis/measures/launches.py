"""What the host launches in the GPU windows: kernels per step, their median length and the share
shorter than a launch call; the outermost ops launching the most kernels; and the host's time in
the forward and backward passes (what compiling them as CUDA graphs would replace)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.class_times import step_class_times, untraced_class_times
from ..core.context import ProfileData
from ..core.host_classes import HostClass
from . import measured
from .basis import basis, in_gpu_windows


@dataclass(frozen=True)
class KernelLaunches:
    """The GPU windows' kernels."""

    per_step: float
    median_ns: float | None  # None: no kernel in the windows
    short_share: float | None  # of the kernels, shorter than the threshold asked for


@dataclass(frozen=True)
class LaunchingOp:
    """An outermost op and the kernels it launches per step (fields in the evidence's column order)."""

    op: str
    kernels_per_step: float
    median_kernel_us: float | None
    short_kernels_per_step: float
    gpu_ms_per_step: float
    steps: list[int]


@measured
def kernel_launches(data: ProfileData, short_ns: int) -> KernelLaunches:
    """Kernels per GPU window, their median duration and the share shorter than ``short_ns``."""
    k = data.rows(
        f"""SELECT count(*)::DOUBLE / {basis(data).windows} AS per_step, median(k.end_ns - k.start_ns) AS med_ns,
                             count(*) FILTER (WHERE k.end_ns - k.start_ns < {short_ns})::DOUBLE / count(*) AS short
                      FROM kernels k {in_gpu_windows(data, "k")}"""
    )[0]
    return KernelLaunches(k["per_step"], k["med_ns"], k["short"])


@measured
def top_launching_ops(data: ProfileData, short_ns: int, top: int) -> tuple[LaunchingOp, ...]:
    """The ``top`` outermost ops launching the most kernels per step."""
    if not data.has("ops"):
        return ()
    windows = basis(data).windows
    rows = data.rows(f"""
        WITH k AS (SELECT k.rank, k.step, k.end_ns - k.start_ns AS ns, a.tid, a.start_ns AS t
                   FROM kernels k {in_gpu_windows(data, "k")}
                   JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id)
        SELECT t.name AS op, count(*)::DOUBLE / {windows} AS kernels_per_step,
               median(k.ns) / 1e3 AS median_kernel_us,
               count(*) FILTER (WHERE k.ns < {short_ns})::DOUBLE / {windows} AS short_kernels_per_step,
               sum(k.ns)::DOUBLE / 1e6 / {windows} AS gpu_ms_per_step,
               list(DISTINCT k.step ORDER BY k.step) AS steps
        FROM k ASOF JOIN (SELECT rank, tid, start_ns, end_ns, name FROM ops WHERE coalesce(depth, 0) = 0) t
          ON t.rank = k.rank AND t.tid = k.tid AND k.t >= t.start_ns
        WHERE k.t < t.end_ns
        GROUP BY t.name ORDER BY kernels_per_step DESC, gpu_ms_per_step DESC, op LIMIT {top}""")
    return tuple(LaunchingOp(**{**r, "steps": r["steps"] or []}) for r in rows)


@measured
def passes_host_ms(data: ProfileData) -> float | None:
    """The host's time per step in the forward and backward passes: in the steps measured without
    the tracer, else in the traced ones; None when no phase tells them apart."""
    times = untraced_class_times(data)
    if times is not None and HostClass.MODEL in times.measured:
        return times.ms[HostClass.MODEL] or None
    if not data.has("steps"):
        return None
    t = step_class_times(data, "detail_steps")
    return float(t["model_ns"].mean()) / 1e6 if len(t["model_ns"]) and t["model_ns"].any() else None
