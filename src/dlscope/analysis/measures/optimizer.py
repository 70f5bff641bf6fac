"""The optimizer step: its host time, the framework ops inside it, and the kernels it launched by
implementation, per GPU window.

Measured in the optimizer's step (``Optimizer.step#Name.step`` annotations, else the derived
``optimizer`` phase) that starts in a GPU window: its host time per step, the kernels it launched
by implementation (kernels named ``Fused...``, e.g. ``multi_tensor_apply_kernel<...,
FusedAdamMathFunctor...>``: fused; other ``multi_tensor_apply_kernel``: foreach; the rest: per
parameter), their GPU time, the number of distinct kernels (one per arithmetic pass over the
state), and the host time of the top-level framework ops inside the step.

Work that starts inside a forward or backward pass is the model's, not the optimizer's, and is
left out: PyTorch Lightning runs them inside ``optimizer.step(closure)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from . import measured
from .basis import basis, gpu_windows_table, in_gpu_windows

# The optimizer's step ranges: torch's annotation when recorded, else the derived phase.
OPTIMIZER_STEPS_SQL = """SELECT rank, pid, start_ns, end_ns, name FROM phases
    WHERE kind = 'range' AND (name LIKE 'Optimizer.step#%' OR (name = 'optimizer' AND source = 'derived'
          AND NOT EXISTS (SELECT 1 FROM phases q WHERE q.name LIKE 'Optimizer.step#%')))"""
# The forward and backward passes (dlscope's hooks, or derived from the trace).
MODEL_PASSES_SQL = "SELECT rank, start_ns, end_ns FROM phases WHERE kind = 'range' AND name IN ('forward', 'backward')"


@dataclass(frozen=True)
class OptimizerStep:
    """The optimizer steps of the GPU windows, per window."""

    phase_ms: float | None  # host time of the step ranges
    ops_ms: float | None  # host time of the top-level framework ops inside them
    phase: str | None  # a step range's name
    kernels: float  # kernels launched from the step
    foreach_kernels: float  # of those, multi_tensor_apply kernels not fused
    fused_kernels: float  # of those, fused
    per_parameter_kernels: float  # the rest
    gpu_ms: float  # the kernels' time
    distinct_kernels: int  # distinct kernel names: the passes over the state
    steps: tuple[int | None, ...]  # the steps the kernels ran in
    longest_kernel: str | None  # the longest kernel's name


@measured
def optimizer_step_recorded(data: ProfileData) -> bool:
    """Whether the profile recorded an optimizer step (annotation or derived phase)."""
    return bool(data.scalar(f"SELECT count(*) FROM ({OPTIMIZER_STEPS_SQL})"))


def _outside_model_passes(alias: str) -> str:
    """SQL condition: row ``alias`` does not start inside a forward or backward pass of its rank
    (``mp``: the passes that touch an optimizer step range, all a row inside one can start in)."""
    return (
        f"NOT EXISTS (SELECT 1 FROM mp WHERE mp.rank = {alias}.rank AND {alias}.start_ns >= mp.start_ns "
        f"AND {alias}.start_ns < mp.end_ns)"
    )


@measured
def optimizer_step(data: ProfileData) -> OptimizerStep:
    """The optimizer steps' host time and kernels per GPU window."""
    windows = basis(data).windows
    w = gpu_windows_table(data)
    ops_ms = (
        "0::DOUBLE"
        if not data.has("ops")
        else f"""
        SELECT coalesce(sum(o.end_ns - o.start_ns), 0)::DOUBLE FROM ops o ASOF JOIN phw p
          ON p.rank = o.rank AND o.start_ns >= p.start_ns
        WHERE {_outside_model_passes("o")} AND coalesce(o.depth, 0) = 0
          AND o.end_ns <= p.end_ns AND (p.pid IS NULL OR o.pid = p.pid)"""
    )
    r = data.rows(f"""
        WITH ph AS ({OPTIMIZER_STEPS_SQL}),
             phw AS (SELECT ph.* FROM ph JOIN {w} ON {w}.rank = ph.rank AND ph.start_ns >= {w}.start_ns
                                                 AND ph.start_ns < {w}.end_ns),
             -- the passes a row in a step range can start in: a handful (none unless the optimizer runs the
             -- model, as Lightning's closure does), so the check below stays cheap on 500k ops
             mp AS (SELECT DISTINCT m.rank, m.start_ns, m.end_ns FROM ({MODEL_PASSES_SQL}) m
                    JOIN phw q ON q.rank = m.rank AND m.start_ns <= q.end_ns AND m.end_ns >= q.start_ns),
             k AS (SELECT k.name, k.step, k.end_ns - k.start_ns AS ns,
                          CASE WHEN lower(k.name) LIKE '%fused%' THEN 'fused'
                               WHEN lower(k.name) LIKE '%multi_tensor_apply%' THEN 'foreach'
                               ELSE 'per_parameter' END AS impl
                   FROM kernels k {in_gpu_windows(data, "k")}
                   JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
                   ASOF JOIN phw p ON p.rank = a.rank AND a.start_ns >= p.start_ns
                   WHERE a.start_ns < p.end_ns AND {_outside_model_passes("a")})
        SELECT (SELECT sum(end_ns - start_ns)::DOUBLE FROM phw) / 1e6 / {windows} AS phase_ms,
               ({ops_ms}) / 1e6 / {windows} AS ops_ms,
               (SELECT any_value(name) FROM phw) AS phase,
               count(*)::DOUBLE / {windows} AS kernels,
               count(*) FILTER (WHERE impl = 'foreach')::DOUBLE / {windows} AS foreach,
               count(*) FILTER (WHERE impl = 'fused')::DOUBLE / {windows} AS fused,
               count(*) FILTER (WHERE impl = 'per_parameter')::DOUBLE / {windows} AS per_parameter,
               coalesce(sum(ns), 0)::DOUBLE / 1e6 / {windows} AS gpu_ms,
               count(DISTINCT name) AS passes, list(DISTINCT step ORDER BY step) AS steps,
               arg_max(name, ns) AS longest
        FROM k""")[0]
    return OptimizerStep(
        r["phase_ms"],
        r["ops_ms"],
        r["phase"],
        r["kernels"],
        r["foreach"],
        r["fused"],
        r["per_parameter"],
        r["gpu_ms"],
        r["passes"],
        tuple(r["steps"] or ()),
        r["longest"],
    )
