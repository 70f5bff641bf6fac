"""The profile's one clock: int64 nanoseconds since the Unix epoch.

Collectors read a fast monotonic clock (``time.perf_counter_ns``) in the hot path and convert to
epoch time with an offset measured once. The offset is the wall-clock minus monotonic reading,
taken from the tightest of several back-to-back pairs so that the error is bounded by the
smallest read interval (recorded as ``uncertainty_ns``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ClockOffset:
    """``epoch_ns = monotonic_ns + offset_ns`` (within ``uncertainty_ns``)."""

    offset_ns: int
    uncertainty_ns: int
    source: str = "perf_counter_ns"

    def to_epoch(self, monotonic_ns: int) -> int:
        return monotonic_ns + self.offset_ns

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


def measure_offset(
    samples: int = 16, clock: Callable[[], int] = time.perf_counter_ns, wall_clock: Callable[[], int] = time.time_ns
) -> ClockOffset:
    """Measure the ``clock`` -> epoch offset from the tightest of ``samples`` bracketed reads."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        a = clock()
        wall = wall_clock()
        b = clock()
        width = b - a
        if best is None or width < best[0]:
            best = (width, wall - (a + b) // 2)
    assert best is not None
    return ClockOffset(offset_ns=best[1], uncertainty_ns=max(best[0] // 2, 1))
