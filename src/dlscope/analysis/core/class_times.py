"""Host time per class in each step, from the phases: what the steps measured without the
tracer say about where the host's time went.

The tracer slows the host unevenly (a per-parameter optimizer's thousands of tiny ops far more
than a forward pass of large kernels), so durations that a judgement rests on come from the
untraced steps. dlscope's hooks (``source = 'hook'``, :mod:`dlscope.capture.torch_hooks`) time
DataLoader ``next()``, forward, backward, the optimizer step and the host's waits for the GPU in
every step; a user's own phases count by their names (:mod:`.host_classes`).

:func:`step_class_times` gives, per (rank, step) of a step set, the step's duration split into
the classes (nested phases go to the inner class, see :data:`.host_classes.PRECEDENCE`; the rest
is ``other``) and the time blocked in ``sync`` phases. :func:`untraced_class_times` averages them
over the steps statistics use (the untraced ones), and says whether they can be trusted: a class
is measured in the untraced steps only if its phases were recorded there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import interval_arrays as ia
from .context import ProfileData
from .host_classes import CLASS_RE, PRECEDENCE, SYNC_PHASE_RE, HostClass
from .host_state import main_pid_sql
from .phase_islands import islands

COLUMNS = ("rank", "step", "step_ns", *(f"{c.label}_ns" for c in HostClass), "sync_ns")


def step_class_times(data: ProfileData, steps: str = "stat_steps", waits_apart: bool = False) -> dict[str, np.ndarray]:
    """Per (rank, step) of ``steps`` (a view or table with rank, step, start_ns, end_ns): the
    columns of :data:`COLUMNS`, in ns, ordered by rank and step. A class's time includes the
    host's waits inside it, unless ``waits_apart``: then the ``sync`` time is no class's, and
    the classes hold the host's own work alone."""
    got = data.con.execute(
        f"SELECT rank, step, start_ns, end_ns FROM {steps} WHERE end_ns > start_ns ORDER BY rank, step"
    ).fetchnumpy()
    rank = np.asarray(got["rank"], np.int64)
    start, end = np.asarray(got["start_ns"], np.int64), np.asarray(got["end_ns"], np.int64)
    out: dict[str, np.ndarray] = {"rank": rank, "step": np.asarray(got["step"], np.int64), "step_ns": end - start}
    zero = np.zeros(len(rank), np.int64)
    if not len(rank) or not data.has("phases"):
        for c in HostClass:
            out[f"{c.label}_ns"] = out["step_ns"].copy() if c is HostClass.OTHER else zero.copy()
        out["sync_ns"] = zero
        return out
    sync = ia.covered(rank, start, end, islands(data, (SYNC_PHASE_RE,), activity_only=True))
    done = sync if waits_apart else zero
    for i, cls in enumerate(PRECEDENCE):
        # the class and those inside it (the inner wins); with waits_apart, the waits as well
        patterns = (*((SYNC_PHASE_RE,) if waits_apart else ()), *(CLASS_RE[c] for c in PRECEDENCE[: i + 1]))
        cov = ia.covered(rank, start, end, islands(data, patterns, activity_only=True))
        out[f"{cls.label}_ns"] = np.maximum(cov - done, 0)
        done = np.maximum(cov, done)
    out["other_ns"] = np.maximum(out["step_ns"] - done, 0)
    out["sync_ns"] = sync
    return out


@dataclass(frozen=True)
class ClassTimes:
    """Mean host time per step, per class, over ``steps`` untraced steps (all ranks)."""

    steps: int
    step_ms: float
    ms: dict[HostClass, float]
    sync_ms: float
    measured: frozenset[HostClass]  # classes whose phases were recorded in these steps
    hooked: bool  # dlscope's hooks timed the framework's phases
    # per class, the mean over these steps of how far the GPU was behind the host as the class's
    # last phase of the step ended (its GPU mark's end against the phase's), and its standard error:
    # only where the phases carry GPU marks (dlscope's hooks, torch 2.x on CUDA)
    lag_ms: dict[HostClass, float] = field(default_factory=dict)
    lag_se_ms: dict[HostClass, float] = field(default_factory=dict)
    se_ms: dict[HostClass, float] = field(default_factory=dict)  # the standard error of each class's mean time

    def covers(self, classes: set[HostClass]) -> bool:
        """Whether every class in ``classes`` (besides other, the rest) was measured."""
        return all(c in self.measured for c in classes if c is not HostClass.OTHER)


def untraced_class_times(data: ProfileData) -> ClassTimes | None:
    """:class:`ClassTimes` over the steps measured without the tracer; None when there are none
    (every step traced, or no steps). Computed once per opened profile (the replay's calibration
    and launch_bound's what-if both read it)."""
    times: ClassTimes | None = data.computed("untraced_class_times", lambda: _untraced_class_times(data))
    return times


def _untraced_class_times(data: ProfileData) -> ClassTimes | None:
    if not data.has("steps") or not data.traced_excluded:
        return None
    t = step_class_times(data, "stat_steps")
    n = len(t["step"])
    if not n:
        return None
    hooked = data.has("phases") and bool(
        data.scalar("SELECT count(*) FROM (SELECT 1 FROM phases WHERE source = 'hook' LIMIT 1)")
    )
    measured = frozenset(c for c in HostClass if c is HostClass.OTHER or t[f"{c.label}_ns"].any())
    return ClassTimes(
        n,
        float(t["step_ns"].mean()) / 1e6,
        {c: float(t[f"{c.label}_ns"].mean()) / 1e6 for c in HostClass},
        float(t["sync_ns"].mean()) / 1e6,
        measured,
        hooked,
        *_end_lags(data),
        {c: float(t[f"{c.label}_ns"].std(ddof=1)) / 1e6 / np.sqrt(n) if n > 1 else 0.0 for c in HostClass},
    )


def _end_lags(data: ProfileData) -> tuple[dict[HostClass, float], dict[HostClass, float]]:
    """:attr:`ClassTimes.lag_ms` and ``lag_se_ms`` from the GPU marks of the phases in the untraced steps."""
    out: dict[HostClass, float] = {}
    se: dict[HostClass, float] = {}
    if not data.has("phase_gpu"):
        return out, se
    for c in PRECEDENCE:
        got = data.con.execute(
            f"""WITH mp AS ({main_pid_sql(data)}),
                marks AS (SELECT g.rank, g.step, g.end_ns, g.gpu_end_ns - g.end_ns AS lag_ns
                          FROM phase_gpu g JOIN stat_steps s ON s.rank = g.rank AND s.step = g.step
                          LEFT JOIN mp m ON m.rank = g.rank
                          WHERE g.gpu_end_ns IS NOT NULL AND (m.pid IS NULL OR g.pid = m.pid)
                            AND regexp_matches(lower(g.name), '{CLASS_RE[c]}')),
                last AS (SELECT arg_max(lag_ns, end_ns) AS lag_ns FROM marks GROUP BY rank, step)
            SELECT avg(lag_ns), count(*), coalesce(stddev_samp(lag_ns), 0) FROM last"""
        ).fetchall()[0]
        if got[1]:
            out[c] = float(got[0]) / 1e6
            se[c] = float(got[2]) / 1e6 / float(np.sqrt(got[1]))
    return out, se
