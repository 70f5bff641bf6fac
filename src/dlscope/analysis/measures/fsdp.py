"""FSDP passes without the tracer: per rank and pass (forward, backward), how long the compute
stream can have waited in the pass per step in the steps measured without tracing.

That is the median untraced GPU span of the pass (``phase_gpu``: CUDA events at the phase marks)
less the median compute-kernel time inside its traced spans (GPU time, which the tracer does not
slow; the compute kernels' union from :func:`dlscope.analysis.reports.fsdp_units.compute_islands`). A
pass that occurs more than once in a step (gradient accumulation) counts as the sum of its
occurrences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import interval_arrays as ia
from ..core.context import ProfileData
from ..reports import fsdp_units
from . import measured


@dataclass(frozen=True)
class PassIdle:
    """How long one rank's compute stream can have waited in one pass per untraced step."""

    rank: int
    pass_name: str  # 'forward' or 'backward'
    idle_ms: float


@measured
def untraced_pass_idle(data: ProfileData) -> tuple[PassIdle, ...]:
    """Per (rank, pass) with GPU marks in both untraced and traced steps; empty without."""
    if not data.has("phase_gpu"):
        return ()
    marks = data.con.execute("""
        SELECT g.rank, g.step, g.name, g.gpu_start_ns, g.gpu_end_ns, s.traced
        FROM phase_gpu g JOIN steps s ON s.rank = g.rank AND s.step = g.step
        WHERE g.name IN ('forward', 'backward') AND (s.traced OR NOT s.warmup)""").fetchnumpy()
    if not len(marks["rank"]):
        return ()
    rank = marks["rank"].astype(np.int64)
    start, end = marks["gpu_start_ns"].astype(np.int64), marks["gpu_end_ns"].astype(np.int64)
    traced = marks["traced"].astype(bool)
    busy = ia.covered(rank, start, end, fsdp_units.compute_islands(data))
    spans: dict[tuple[int, str], list[float]] = {}
    work: dict[tuple[int, str], list[float]] = {}
    # per (rank, pass, step): a pass that occurs more than once in a step (gradient accumulation)
    # counts as the sum of its occurrences
    per_step: dict[tuple[int, str, int, bool], list[float]] = {}
    for i, key in enumerate(zip(rank.tolist(), marks["name"].tolist(), marks["step"].tolist(), traced.tolist())):
        x = per_step.setdefault(key, [0.0, 0.0])
        x[0] += float(end[i] - start[i])
        x[1] += float(busy[i])
    for (r, name, _, was_traced), (span, b) in per_step.items():
        (work if was_traced else spans).setdefault((r, name), []).append(b if was_traced else span)
    return tuple(
        PassIdle(r, name, max(float(np.median(spans[(r, name)])) - float(np.median(work[(r, name)])), 0.0) / 1e6)
        for (r, name) in spans
        if (r, name) in work
    )
