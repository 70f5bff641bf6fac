"""The summary: the first thing a user reads (``dlscope summary``, end of ``dlscope profile``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...store.meta import RunEnd
from ..reports.gpu_metrics import headline as gpu_headline
from .context import ProfileData
from .headline import Headline, headline
from .job_end import JobEnd, how_ended, job_end
from .layers import LayerStatus, layer_status
from .phases import PhaseRow, phase_breakdown, wall_ns
from .steps import StepStats, step_stats
from .unavailable import unavailable_lines


@dataclass
class Summary:
    profile: str
    source: str
    command: list[str] | None
    wall_ms: float
    exit_code: int | None
    steps: StepStats
    phases: list[PhaseRow]
    layers: dict[str, LayerStatus]
    devices: list[dict[str, Any]]
    selection: str
    notes: list[str] = field(default_factory=list)
    # hardware layer: headline GPU counters per device, and what could not be captured and why
    gpu: list[dict[str, Any]] = field(default_factory=list)
    unavailable: list[str] = field(default_factory=list)
    headline: Headline | None = None  # None: no GPU activity
    run_end: RunEnd | None = None
    # the program failed before its first step: this line is the whole story (no steps, no rules)
    failure: str | None = None
    # a rank of the distributed job ended abnormally: which, how, when, and the steps analysed
    job_end: JobEnd | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.failure is not None:
            return {
                "profile": self.profile,
                "failure": self.failure,
                "source": self.source,
                "command": self.command,
                "wall_ms": self.wall_ms,
                "exit_code": self.exit_code,
                "run_end": asdict(self.run_end) if self.run_end else None,
                "notes": self.notes,
            }
        return {
            "profile": self.profile,
            "source": self.source,
            "command": self.command,
            "wall_ms": self.wall_ms,
            "exit_code": self.exit_code,
            "steps": self.steps.as_dict(),
            "phases": [p.as_dict() for p in self.phases],
            "layers": {k: v.as_dict() for k, v in self.layers.items()},
            "devices": self.devices,
            "selection": self.selection,
            "notes": self.notes,
            "gpu": self.gpu,
            "unavailable": self.unavailable,
            "headline": self.headline.as_dict() if self.headline else None,
        } | ({"job_end": self.job_end.as_dict()} if self.job_end is not None else {})


def distinct_devices(devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU once: every rank of a job records the GPUs it sees and the NVML sampler records the
    host's, so a 4-rank job on 4 GPUs lists each of them 4 times. Where NVML named GPUs by UUID,
    those records are the host's GPUs (a rank's own record may number its GPU after
    CUDA_VISIBLE_DEVICES); else one per (host, index, name). The first record of each is kept,
    with the ranks that recorded it."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    if any(d.get("uuid") for d in devices):
        devices = [d for d in devices if d.get("uuid")]
    for d in devices:
        key = (d.get("uuid"),) if d.get("uuid") else (d.get("host"), d.get("index"), d.get("name"))
        if key not in out:
            out[key] = {k: v for k, v in d.items() if k != "rank"} | {"ranks": []}
        if d.get("rank") is not None and d["rank"] not in out[key]["ranks"]:
            out[key]["ranks"].append(d["rank"])
    return list(out.values())


def failure_line(end: RunEnd | None, steps: StepStats) -> str | None:
    """'the program failed before its first step: exit code 1: ModuleNotFoundError: ...' when it
    did (no step recorded, none found by --key-node either), else None."""
    if end is None or not end.failed_before_first_step or steps.total_steps:
        return None
    return f"the program failed before its first step: {how_ended(end.exit_code, end.signal)}" + (
        f": {end.last_stderr_line}" if end.last_stderr_line else ""
    )


def summarize(data: ProfileData) -> Summary:
    m = data.meta
    steps = step_stats(data)
    return Summary(
        profile=str(data.path),
        source=m.source,
        command=m.command,
        wall_ms=wall_ns(data) / 1e6,
        exit_code=m.exit_code,
        steps=steps,
        phases=phase_breakdown(data),
        layers=layer_status(data),
        devices=distinct_devices(m.devices),
        selection=data.selection.describe(),
        notes=list(m.notes),
        gpu=gpu_headline(data),
        unavailable=unavailable_lines(m),
        headline=headline(data),
        run_end=m.run_end,
        failure=failure_line(m.run_end, steps),
        job_end=job_end(data),
    )
