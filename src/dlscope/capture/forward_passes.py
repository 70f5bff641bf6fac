"""One ``forward`` phase per forward pass.

The hooks (:mod:`.torch_hooks`) open ``forward`` at every outermost module call, so a loss module
called after the model (``criterion(model(x), y)``) made a second ``forward`` in every step (106
over 53 steps). A PyTorch or DLProf user counts one forward per pass, the loss included (the
forward derived from a PyTorch trace, :mod:`dlscope.importers.torch_phases`, spans the loss too).
So the outermost calls of one pass are merged here, where all of a process's phases are known,
into one ``forward`` from the first call's start to the last one's end.

Two consecutive ``forward`` ranges of a thread are one pass when, between them:

* no step boundary falls (both lie in the same step: without steps nothing tells passes apart,
  and an inference loop keeps one ``forward`` per call);
* no ``backward``, ``optimizer`` or ``dataloader`` hook phase starts (gradient accumulation runs
  several passes per step; the next batch starts a new one);
* no other range of the thread starts or ends unless it lies wholly between them: the merged
  range must nest with the user's phases (``with phase("model"): out = model(x)`` followed by the
  loss keeps two ``forward``, one in that phase and one after it).

The ``phase_gpu`` marks of the merged calls become one mark (first GPU start, last GPU end).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .torch_hooks import BACKWARD, DATALOADER, FORWARD, HOOK_SOURCE, OPTIMIZER

# hook phases that end a forward pass when they start
PASS_ENDS = (BACKWARD, OPTIMIZER, DATALOADER)


def merge_forward_calls(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """``tables`` (one process's decoded tables) with the hook ``forward`` calls of each pass merged."""
    phases, steps = tables.get("phases"), tables.get("steps")
    if phases is None or steps is None or not steps.num_rows or "source" not in phases.column_names:
        return tables
    is_range = _is_in(phases, "kind", ("range",))
    hook = is_range & _is_in(phases, "source", (HOOK_SOURCE,))
    is_fw = hook & _is_in(phases, "name", (FORWARD,))
    fw = np.nonzero(is_fw)[0]
    if len(fw) < 2:
        return tables
    tid = phases.column("tid").to_numpy(zero_copy_only=False).astype(np.int64)
    start = phases.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    end = phases.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    fw = fw[np.lexsort((start[fw], tid[fw]))]
    s0, s1 = _sorted_steps(steps)
    # gap k lies between forward fw[k] and fw[k + 1]
    g_tid = tid[fw[:-1]]
    g_lo, g_hi = end[fw[:-1]], start[fw[1:]]
    merge = (g_tid == tid[fw[1:]]) & (g_lo <= g_hi)
    k_lo, k_hi = _step_of(s0, s1, g_lo), _step_of(s0, s1, g_hi)
    merge &= (k_lo >= 0) & (k_lo == k_hi)
    ends_pass = np.nonzero(hook & _is_in(phases, "name", PASS_ENDS))[0]
    others = np.nonzero(is_range & ~is_fw)[0]
    for t in np.unique(g_tid[merge]):
        on = merge & (g_tid == t)
        p = ends_pass[tid[ends_pass] == t]
        merge[on] &= ~_starts_between(np.sort(start[p]), g_lo[on], g_hi[on])
        o = others[tid[others] == t]
        merge[on] &= _only_inside(start[o], end[o], g_lo[on], g_hi[on])
    if not merge.any():
        return tables
    # chains of merged calls: each becomes its first row, ending where its last call ends
    first = np.concatenate([[True], ~merge])
    group = np.cumsum(first) - 1
    last_end = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last_end, group, end[fw])
    drop = np.zeros(phases.num_rows, bool)
    drop[fw[~first]] = True
    new_end = end.copy()
    new_end[fw[first]] = last_end
    i_end = phases.schema.get_field_index("end_ns")
    merged = phases.set_column(i_end, phases.schema.field(i_end), pa.array(new_end, phases.schema.field(i_end).type))
    out = dict(tables)
    out["phases"] = merged.filter(pa.array(~drop))
    if out.get("phase_gpu") is not None and out["phase_gpu"].num_rows:
        out["phase_gpu"] = _merge_gpu_marks(
            out["phase_gpu"], tid[fw[first]], start[fw[first]], last_end, np.bincount(group) > 1
        )
    return out


def _is_in(table: pa.Table, column: str, values: tuple[str, ...]) -> np.ndarray:
    """Rows whose ``column`` is one of ``values`` (never for NULL), as a numpy mask: the phases of
    a long run number hundreds of thousands, too many to compare as Python strings."""
    import pyarrow.compute as pc

    hit = pc.fill_null(pc.is_in(table.column(column), value_set=pa.array(values, pa.string())), False)
    mask: np.ndarray = hit.to_numpy(zero_copy_only=False).astype(bool)
    return mask


def _sorted_steps(steps: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    s0 = steps.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    s1 = steps.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.argsort(s0, kind="stable")
    return s0[order], s1[order]


def _step_of(s0: np.ndarray, s1: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Index of the step holding each time (start <= t < end), -1 where none does."""
    k = np.searchsorted(s0, t, side="right") - 1
    inside = (k >= 0) & (t < s1[np.maximum(k, 0)])
    return np.where(inside, k, -1)


def _starts_between(sorted_starts: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per (lo, hi): whether a start lies in [lo, hi]."""
    return np.searchsorted(sorted_starts, hi, side="right") > np.searchsorted(sorted_starts, lo, side="left")


def _only_inside(o_start: np.ndarray, o_end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per gap (lo, hi): every range with an end point in it lies wholly in it."""
    ok = np.ones(len(lo), bool)
    if not len(o_start):
        return ok
    by_start = np.argsort(o_start, kind="stable")
    st, en = o_start[by_start], o_end[by_start]
    a, b = np.searchsorted(st, lo, side="left"), np.searchsorted(st, hi, side="right")
    ok &= _slice_max(en, a, b, hi) <= hi  # those starting in the gap end in it
    by_end = np.argsort(o_end, kind="stable")
    st, en = o_start[by_end], o_end[by_end]
    a, b = np.searchsorted(en, lo, side="left"), np.searchsorted(en, hi, side="right")
    ok &= -_slice_max(-st, a, b, -lo) >= lo  # those ending in it started in it
    return ok


def _slice_max(v: np.ndarray, a: np.ndarray, b: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """max(v[a:b]) per slice; ``empty`` where a >= b."""
    out = empty.astype(np.int64).copy()
    some = b > a
    if some.any():
        padded = np.append(v, v[-1])  # reduceat needs every index < len
        idx = np.stack([a[some], b[some]], axis=1).ravel()
        out[some] = np.maximum.reduceat(padded, idx)[::2]
    result: np.ndarray = out
    return result


def _merge_gpu_marks(
    gpu: pa.Table, f_tid: np.ndarray, f_start: np.ndarray, f_end: np.ndarray, merged: np.ndarray
) -> pa.Table:
    """The ``forward`` GPU marks whose host start lies in one merged range become one mark: the
    first GPU start, the last GPU end, the host span of them all."""
    is_fw = _is_in(gpu, "name", (FORWARD,))
    tid = gpu.column("tid").to_numpy(zero_copy_only=False).astype(np.int64)
    cols = {
        c: gpu.column(c).to_numpy(zero_copy_only=False).astype(np.int64).copy()
        for c in ("start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns")
    }
    hs = cols["start_ns"]
    keep = np.ones(gpu.num_rows, bool)
    for t in np.unique(f_tid[merged]):
        on = np.nonzero(merged & (f_tid == t))[0]
        r0, r1 = f_start[on], f_end[on]  # disjoint, in order
        rows = np.nonzero(is_fw & (tid == t))[0]
        g = np.searchsorted(r0, hs[rows], side="right") - 1
        inside = (g >= 0) & (hs[rows] <= r1[np.maximum(g, 0)])
        rows, g = rows[inside], g[inside]
        for k in np.unique(g):
            grp = rows[g == k]
            if len(grp) < 2:
                continue
            f = grp[np.argmin(hs[grp])]
            for c in ("start_ns", "gpu_start_ns"):
                cols[c][f] = cols[c][grp].min()
            for c in ("end_ns", "gpu_end_ns"):
                cols[c][f] = cols[c][grp].max()
            keep[grp[grp != f]] = False
    if keep.all():
        return gpu
    for c, v in cols.items():
        i = gpu.schema.get_field_index(c)
        gpu = gpu.set_column(i, gpu.schema.field(i), pa.array(v, gpu.schema.field(i).type))
    return gpu.filter(pa.array(keep))
