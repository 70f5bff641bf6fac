"""Where to cut a timeline: into parts under the event and byte limits, or after N events.

Works on the rows sorted by anchor time (numpy arrays, one element per row). A cut never falls
between two rows with the same anchor (a launch and the GPU work it caused share one), and
prefers a step boundary when one lies in the second half of a part, so parts read as whole
steps where they can.
"""

from __future__ import annotations

import numpy as np


def _snap(anchors: np.ndarray, i: int, j: int, step_starts: np.ndarray | None) -> int:
    """Move a cut at row ``j`` (part starts at row ``i``) back to a clean boundary."""
    k = int(np.searchsorted(anchors, anchors[j], "left"))
    if k > i:
        j = k  # else one instant alone exceeds the limit: cut inside it rather than not at all
    if step_starts is not None and len(step_starts):
        s = int(np.searchsorted(step_starts, anchors[j], "right")) - 1
        if s >= 0:
            at = int(np.searchsorted(anchors, step_starts[s], "left"))
            if i + (j - i) // 2 < at < j:
                j = at
    return j


def part_starts(
    anchors: np.ndarray,
    nev: np.ndarray,
    nbytes: np.ndarray,
    max_events: int,
    max_bytes: int,
    step_starts: np.ndarray | None = None,
) -> list[int]:
    """Row indices where parts begin (the first is 0) such that each part's rows hold at most
    ``max_events`` events and ``max_bytes`` bytes, unless a single instant holds more."""
    n = len(anchors)
    if n == 0:
        return [0]
    if max_events <= 0 or max_bytes <= 0:
        raise ValueError("part limits must be positive")
    ce = np.cumsum(nev, dtype=np.int64)
    cb = np.cumsum(nbytes, dtype=np.int64)
    starts = [0]
    i = 0
    while True:
        base_e = int(ce[i - 1]) if i else 0
        base_b = int(cb[i - 1]) if i else 0
        j = min(
            int(np.searchsorted(ce, base_e + max_events, "right")),
            int(np.searchsorted(cb, base_b + max_bytes, "right")),
        )
        if j >= n:
            return starts
        j = max(j, i + 1)  # a part holds at least one row
        j = _snap(anchors, i, j, step_starts)
        starts.append(j)
        i = j


def keep_first(anchors: np.ndarray, nev: np.ndarray, max_events: int) -> int:
    """How many rows (from the start) to keep so that they hold at most ``max_events`` events,
    without separating rows of equal anchor."""
    ce = np.cumsum(nev, dtype=np.int64)
    j = int(np.searchsorted(ce, max_events, "right"))
    if j >= len(anchors):
        return len(anchors)
    return int(np.searchsorted(anchors, anchors[j], "left"))
