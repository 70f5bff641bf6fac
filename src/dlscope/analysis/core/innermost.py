"""The innermost of nested intervals holding each point, per group, in numpy.

Module calls nest on their thread, and so do the backward nodes the autograd engine runs: which
call (or node) a launch or an op lies in is the innermost interval of its thread holding its time.
The latest interval of the group starting at or before the point holds it unless it ended before;
then its parent may, and so on up: a point climbs at most the nesting depth. An interval's parent
is found once, with a stack over the intervals in start order.
"""

from __future__ import annotations

import numpy as np


def parents(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of each interval's innermost enclosing interval (-1: none), for intervals of one group
    sorted by start, the longer first at equal starts. Intervals that overlap without nesting (a
    damaged trace) are treated as siblings."""
    out = np.full(len(start), -1, np.int64)
    stack: list[int] = []
    s_list, e_list = start.tolist(), end.tolist()
    for i, (s, e) in enumerate(zip(s_list, e_list)):
        while stack and e_list[stack[-1]] < e:
            stack.pop()
        while stack and e_list[stack[-1]] < s:
            stack.pop()
        if stack:
            out[i] = stack[-1]
        stack.append(i)
    return out


def innermost(
    iv_group: np.ndarray, iv_start: np.ndarray, iv_end: np.ndarray, pt_group: np.ndarray, pt_time: np.ndarray
) -> np.ndarray:
    """For each point (group, time), the index (into the intervals as given) of the innermost
    interval of its group with start <= time <= end; -1 where none holds it."""
    iv_group, iv_start, iv_end = (np.asarray(a, np.int64) for a in (iv_group, iv_start, iv_end))
    pt_group, pt_time = np.asarray(pt_group, np.int64), np.asarray(pt_time, np.int64)
    result = np.full(len(pt_time), -1, np.int64)
    if not len(iv_start) or not len(pt_time):
        return result
    order = np.lexsort((-iv_end, iv_start, iv_group))
    g, s, e = iv_group[order], iv_start[order], iv_end[order]
    bounds = np.flatnonzero(np.diff(g)) + 1
    firsts = np.concatenate([[0], bounds])
    lasts = np.concatenate([bounds, [len(g)]])
    for a, b in zip(firsts.tolist(), lasts.tolist()):
        on = np.flatnonzero(pt_group == g[a])
        if not len(on):
            continue
        gs, ge = s[a:b], e[a:b]
        par = parents(gs, ge)
        t = pt_time[on]
        idx = np.searchsorted(gs, t, side="right") - 1
        while True:
            out_of = (idx >= 0) & (ge[np.maximum(idx, 0)] < t)
            if not out_of.any():
                break
            idx[out_of] = par[idx[out_of]]
        found = idx >= 0
        result[on[found]] = order[a + idx[found]]
    return result
