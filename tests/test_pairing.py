"""Pairing enter/exit events into ranges, checked against a plain stack-based reference on
random well-formed and damaged event streams."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dlscope.capture.finalize import pair_phase_events


def reference(events: list[tuple[int, int, int]], open_end: int) -> list[tuple[int, int, int, int, bool]]:
    """events: (tid, nid, signed t) in recording order -> sorted (nid, tid, start, end, unclosed)."""
    stacks: dict[tuple[int, int], list[int]] = {}
    out = []
    for tid, nid, v in events:
        st_ = stacks.setdefault((tid, nid), [])
        if v > 0:
            st_.append(v)
        elif st_:
            out.append((nid, tid, st_.pop(), -v, False))
    for (tid, nid), st_ in stacks.items():
        out += [(nid, tid, s, open_end, True) for s in st_]
    return sorted(out)


@st.composite
def streams(draw):
    """Random interleavings of nested same-name phases on a few threads, with some events lost."""
    t = 1
    events = []
    stacks: dict[tuple[int, int], int] = {}
    for _ in range(draw(st.integers(0, 60))):
        tid, nid = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        t += draw(st.integers(1, 5))
        depth = stacks.get((tid, nid), 0)
        enter = depth == 0 or draw(st.booleans())
        stacks[(tid, nid)] = depth + (1 if enter else -1)
        if draw(st.integers(0, 9)) != 0:  # 10% of events lost (paused recording, kill)
            events.append((tid, nid, t if enter else -t))
    return events


@settings(max_examples=300, deadline=None)
@given(streams())
def test_pairing_matches_stack_reference(events):
    open_end = 10**6
    arr = np.array(events, dtype=np.int64).reshape(-1, 3)
    nid, tid, s, e, unc = pair_phase_events(arr[:, 1], arr[:, 0], arr[:, 2], open_end)
    got = sorted(zip(nid.tolist(), tid.tolist(), s.tolist(), e.tolist(), unc.tolist()))
    assert got == reference(events, open_end)
