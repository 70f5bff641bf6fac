"""One profile's mean step time as a sum of parts, so that a diff's rows add up to the change.

With GPU data, each decomposed window (a traced step that launched GPU work, see
:func:`..step_idle.step_idle`) splits exactly into GPU busy time and GPU idle time by cause
(queued, input, sync, launch, other). Busy time is shared among the kernels, copies and sets
that ran in the window in proportion to their own durations there (clipped to the window): where
work overlaps on several streams each piece gets its share of the overlapped time, so the parts
still sum to the busy time. Without GPU data, a step splits into the outermost phases on its own
thread and the time outside them (:func:`..step_phases.step_phases`).

The decomposition covers the windows; the step-time statistics cover ``stat_steps``. When every
step was traced the two are the same steps (up to steps without GPU work), and what differs is one
more row ("not decomposed"). In a profile with sampled detail (``dlscope profile``'s default mode)
the statistics steps are the untraced ones and the windows the traced ones, which tracing slowed.
Tracing slows the host (the profiler's callbacks), never the GPU, as the advice's ``gpu_idle`` and
:mod:`..replay` hold, so the windows are calibrated to the untraced step: the GPU busy rows keep
the traced steps' busy time per step; the idle total becomes the untraced mean step minus that
busy time (never below 0), split over the causes in proportion to the traced steps' idle split.
The rows then sum to the untraced mean step with no other row. A residual remains only where the
calibration cannot close the sum: busy time longer than the untraced step (the part beyond it is a
negative row) or traced steps without idle time to take the split from; its name says which.
Either way the rows sum to the statistics steps' mean step time exactly, by construction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.context import ProfileData
from ..core.gpu_work import gpu_work_sql
from ..core.step_idle import step_idle
from ..core.step_phases import step_phases

IDLE_PARTS = {
    "queued": "GPU idle: waiting on its own earlier work (dependencies, other streams)",
    "input": "GPU idle: host loading input data",
    "sync": "GPU idle: host synchronizing",
    "launch": "GPU idle: host busy launching or in other work",
    "other": "GPU idle: no host activity recorded",
}
RESIDUAL_KEY = "other:not decomposed"
RESIDUAL_LABEL = (
    "steps not decomposed (traced steps differ from the statistics steps: tracing overhead, steps without GPU work)"
)
# residuals left by the calibration to untraced steps (same key: at most one of them per side)
BUSY_OVER_LABEL = "steps not decomposed (GPU busy time of the traced steps beyond the untraced mean step)"
IDLE_UNSPLIT_LABEL = "steps not decomposed (GPU idle time of the untraced steps: the traced steps had none to split by)"
EARLIER_KEY = "gpu:(work launched before the step)"


@dataclass
class Part:
    key: str  # kind:name, the key two profiles are matched on
    kind: str  # 'kernel', 'memcpy', 'memset', 'idle', 'phase', 'other'
    name: str
    ms: float  # per step

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Decomposition:
    mean_step_ms: float | None  # mean over the statistics steps; the parts sum to it
    windows: int  # steps decomposed
    basis: str  # 'gpu' (busy by kernel + idle by cause), 'phases' (no GPU data), 'none'
    parts: list[Part] = field(default_factory=list)
    # idle rows scaled from the traced windows to the untraced steps (see the module doc): the
    # factor on the traced idle time, None when the windows were taken as they are
    idle_scale: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "mean_step_ms": self.mean_step_ms,
            "windows": self.windows,
            "basis": self.basis,
            "idle_scale": self.idle_scale,
            "parts": [p.as_dict() for p in self.parts],
        }


def _gpu_parts(data: ProfileData) -> tuple[list[Part], int, float]:
    idle = step_idle(data)
    if not idle.num_rows:
        return [], 0, 0.0
    n = idle.num_rows
    cols = {c: float(sum(idle.column(f"{c}_ns").to_pylist())) for c in ("window", "busy", *IDLE_PARTS)}
    data.con.register("dl_cmp_windows", idle.select(["rank", "start_ns", "end_ns", "busy_ns"]))
    try:
        work = gpu_work_sql(data, selected=False)
        rows = data.rows(f"""
            WITH w AS (SELECT row_number() OVER () AS wid, * FROM dl_cmp_windows),
                 clip AS (SELECT w.wid, k.kind, k.name,
                                 (least(k.end_ns, w.end_ns) - greatest(k.start_ns, w.start_ns))::DOUBLE AS ns
                          FROM ({work}) k ASOF JOIN w ON k.rank = w.rank AND k.start_ns >= w.start_ns
                          WHERE k.start_ns < w.end_ns),
                 per AS (SELECT wid, kind, name, sum(ns) AS ns FROM clip GROUP BY ALL),
                 tot AS (SELECT wid, sum(ns) AS ns FROM per GROUP BY wid)
            SELECT * FROM (
                SELECT per.kind, per.name, sum(per.ns * w.busy_ns / tot.ns)::DOUBLE AS ns
                FROM per JOIN tot USING (wid) JOIN w USING (wid) WHERE tot.ns > 0 GROUP BY ALL)
            ORDER BY round(ns) DESC, kind, name  -- the same order every run (threads group and sum in any order)""")
    finally:
        data.con.unregister("dl_cmp_windows")
    parts = [Part(f"{r['kind']}:{r['name']}", r["kind"], r["name"], r["ns"] / 1e6 / n) for r in rows]
    # busy time of windows in which no work started (a kernel launched in the previous step ran on)
    leftover = cols["busy"] / 1e6 / n - sum(p.ms for p in parts)
    if abs(leftover) > 1e-9:
        parts.append(Part(EARLIER_KEY, "other", "GPU busy with work that started before the step", leftover))
    parts += [Part(f"idle:{k}", "idle", label, cols[k] / 1e6 / n) for k, label in IDLE_PARTS.items()]
    return parts, n, cols["window"] / 1e6 / n


def _phase_parts(data: ProfileData) -> tuple[list[Part], int, float]:
    t = step_phases(data)
    if not t.num_rows:
        return [], 0, 0.0
    steps = set(t.column("step").to_pylist())
    n = len(steps)
    total = sum(dict(zip(t.column("step").to_pylist(), t.column("duration_ns").to_pylist())).values())
    by: dict[str | None, float] = {}
    for phase, ns in zip(t.column("phase").to_pylist(), t.column("ns").to_pylist()):
        by[phase] = by.get(phase, 0.0) + float(ns or 0)
    parts = [
        Part(
            f"phase:{p}" if p is not None else "phase:(outside phases)",
            "phase",
            p if p is not None else "(outside phases)",
            ns / 1e6 / n,
        )
        for p, ns in by.items()
    ]
    return parts, n, total / 1e6 / n


def decompose(data: ProfileData) -> Decomposition:
    """The mean step time of ``data``'s statistics steps as a sum of parts (see the module doc)."""
    mean = data.scalar("SELECT avg(end_ns - start_ns)::DOUBLE FROM stat_steps")
    if mean is None:
        return Decomposition(None, 0, "none")
    mean_ms = mean / 1e6
    parts, n, covered_ms = _gpu_parts(data)
    basis = "gpu"
    if not n:
        parts, n, covered_ms = _phase_parts(data)
        basis = "phases"
    if not n:
        return Decomposition(mean_ms, 0, "none", [Part(RESIDUAL_KEY, "other", RESIDUAL_LABEL, mean_ms)])
    if basis == "gpu" and data.traced_excluded:
        return _calibrated(mean_ms, n, parts)
    residual = mean_ms - covered_ms
    if abs(residual) > 1e-9:
        parts.append(Part(RESIDUAL_KEY, "other", RESIDUAL_LABEL, residual))
    return Decomposition(mean_ms, n, basis, parts)


def _calibrated(mean_ms: float, n: int, parts: list[Part]) -> Decomposition:
    """The traced windows' parts set against the untraced mean step ``mean_ms``: busy rows as
    they are, idle rows scaled to fill the rest (the module doc says why)."""
    busy = [p for p in parts if p.kind != "idle"]
    idle = [p for p in parts if p.kind == "idle"]
    busy_ms = sum(p.ms for p in busy)
    traced_idle_ms = sum(p.ms for p in idle)
    idle_ms = max(0.0, mean_ms - busy_ms)
    scale = idle_ms / traced_idle_ms if traced_idle_ms > 0 else 0.0
    out = busy + [Part(p.key, p.kind, p.name, p.ms * scale) for p in idle]
    residual = mean_ms - busy_ms - (idle_ms if traced_idle_ms > 0 else 0.0)
    if abs(residual) > 1e-9:
        label = BUSY_OVER_LABEL if residual < 0 else IDLE_UNSPLIT_LABEL
        out.append(Part(RESIDUAL_KEY, "other", label, residual))
    return Decomposition(mean_ms, n, "gpu", out, idle_scale=scale)
