"""Which steps to record: a pure function from step index to action, testable alone.

``StepSchedule(start, stop, warmup)``: steps before ``start`` and after ``stop`` (inclusive
bounds) are not recorded; of the recorded ones, the first ``warmup`` are flagged warm-up and left
out of statistics by default. ``--steps A:B`` sets start and stop; without a window the first
step is warm-up (it pays for lazy initialization, allocator growth and autotuning).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..errors import UsageError


class Action(enum.Enum):
    SKIP = "skip"
    WARMUP = "warmup"
    RECORD = "record"


DEFAULT_WARMUP = 1


@dataclass(frozen=True)
class StepSchedule:
    start: int = 0
    stop: int | None = None
    warmup: int = DEFAULT_WARMUP

    def action(self, step: int) -> Action:
        if step < self.start or (self.stop is not None and step > self.stop):
            return Action.SKIP
        if step < self.start + self.warmup:
            return Action.WARMUP
        return Action.RECORD

    @property
    def windowed(self) -> bool:
        return self.start > 0 or self.stop is not None

    @classmethod
    def from_options(cls, steps: str | tuple[int | None, int | None] | None, warmup: int | None) -> StepSchedule:
        start, stop = parse_steps(steps) if isinstance(steps, str) else (steps or (None, None))
        windowed = start is not None or stop is not None
        if warmup is None:
            warmup = 0 if windowed else DEFAULT_WARMUP
        if warmup < 0:
            raise UsageError(f"warm-up must be >= 0, got {warmup}")
        return cls(start=start or 0, stop=stop, warmup=warmup)


def parse_steps(spec: str) -> tuple[int | None, int | None]:
    """Parse 'A:B', 'A:' or ':B' (inclusive step numbers)."""
    text = spec.strip()
    if ":" not in text:
        raise UsageError(f"--steps wants A:B (inclusive step numbers), got {spec!r}")
    a, b = text.split(":", 1)
    try:
        start = int(a) if a.strip() else None
        stop = int(b) if b.strip() else None
    except ValueError:
        raise UsageError(f"--steps wants A:B with integers, got {spec!r}") from None
    if (start is not None and start < 0) or (stop is not None and stop < 0):
        raise UsageError(f"--steps wants non-negative step numbers, got {spec!r}")
    if start is not None and stop is not None and stop < start:
        raise UsageError(f"--steps {spec}: the stop step is before the start step")
    return start, stop
