"""The summary: the first thing a user reads (``dlscope summary``, end of ``dlscope profile``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .context import ProfileData
from .gpu_metrics import headline as gpu_headline
from .headline import Headline, headline
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

    def as_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile, "source": self.source, "command": self.command,
            "wall_ms": self.wall_ms, "exit_code": self.exit_code,
            "steps": self.steps.as_dict(),
            "phases": [p.as_dict() for p in self.phases],
            "layers": {k: v.as_dict() for k, v in self.layers.items()},
            "devices": self.devices, "selection": self.selection, "notes": self.notes,
            "gpu": self.gpu, "unavailable": self.unavailable,
            "headline": self.headline.as_dict() if self.headline else None,
        }


def summarize(data: ProfileData) -> Summary:
    m = data.meta
    return Summary(
        profile=str(data.path), source=m.source, command=m.command, wall_ms=wall_ns(data) / 1e6,
        exit_code=m.exit_code, steps=step_stats(data), phases=phase_breakdown(data),
        layers=layer_status(data), devices=m.devices, selection=data.selection.describe(),
        notes=list(m.notes), gpu=gpu_headline(data), unavailable=unavailable_lines(m), headline=headline(data),
    )
