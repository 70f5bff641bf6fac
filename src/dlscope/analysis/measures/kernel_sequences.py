"""Runs of fusible kernels: maximal runs of consecutive elementwise, reduction and normalization
kernels on one stream within a step, grouped by their kernel sequence (HTA's kernel-sequence
analysis, ``get_frequent_cuda_kernel_sequences``).

Fusible: ATen's native elementwise, reduction and normalization kernels; matrix math and the
optimizer's kernels (the foreach ``multi_tensor_apply`` kernels, and any kernel launched inside
the optimizer's step) are left out. Per sequence: how often it occurs per GPU window, its time,
and the time beyond its longest kernel (what a fused kernel, which still does the largest
member's work, could save).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.context import ProfileData
from ..core.kernel_names import kernel_names, kernel_op_join
from ..core.math_kernels import precision_sql
from . import measured
from .basis import basis, in_gpu_windows

OPTIMIZER_PHASE_SQL = "(name LIKE 'Optimizer.step#%' OR name = 'optimizer')"


@dataclass(frozen=True)
class KernelSequence:
    """One sequence of fusible kernel names and its runs, per GPU window."""

    names: tuple[str, ...]
    per_step: float  # runs of it
    kernels: int  # kernels in a run
    ms_per_step: float  # the runs' time
    fusable_ms_per_step: float  # the runs' time beyond each run's longest kernel
    ops: tuple[str, ...]  # the framework ops that launched its kernels, sorted
    steps: tuple[int, ...]  # the steps it ran in


def fusible_sql(col: str) -> str:
    """SQL: ATen's own elementwise, reduction and normalization kernels (not matrix math, not the
    foreach optimizer kernels)."""
    return f"({col} LIKE '%at::native::%' AND {col} NOT LIKE '%multi_tensor_apply%' AND {precision_sql(col)} IS NULL)"


def _kernels_sql(data: ProfileData) -> str:
    """Kernels of the GPU windows with ``fusible`` (optimizer kernels excluded), the launching op."""
    # judged per distinct name (see analysis.kernel_names)
    fusible = f"(SELECT name_id, {fusible_sql('name')} AS fusible FROM {kernel_names(data)})"
    in_opt = "FALSE"
    opt_join = ""
    if data.has("phases") and data.has("api"):
        opt_join = f"""LEFT JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
                       ASOF LEFT JOIN (SELECT rank, start_ns, end_ns FROM phases
                                       WHERE kind = 'range' AND {OPTIMIZER_PHASE_SQL}) p
                         ON p.rank = k.rank AND coalesce(a.start_ns, k.start_ns) >= p.start_ns"""
        in_opt = "coalesce(p.end_ns > coalesce(a.start_ns, k.start_ns), FALSE)"
    return f"""SELECT k.rank, coalesce(k.device, -1) AS device, k.stream, k.step, k.start_ns, k.end_ns, k.name,
                      k.name_id, o.name AS op, f.fusible AND NOT {in_opt} AS fusible
               FROM kernels k JOIN {fusible} f ON f.name_id = k.name_id {in_gpu_windows(data, "k")} {opt_join}
               {kernel_op_join(data)}"""


@measured
def kernel_sequences(data: ProfileData, min_run: int) -> tuple[KernelSequence, ...]:
    """The runs of ``min_run`` or more consecutive fusible kernels on one stream within a step,
    grouped by their kernel sequence, most fusable time first.

    The kernels come from SQL in stream order; the runs are found in numpy and grouped in Python
    (a few thousand runs): two window functions and two groupings over lists of names cost
    five times as much in SQL on a 500k-event profile."""
    w = basis(data).windows
    k = data.con.execute(f"""SELECT rank, device, coalesce(stream, -1) AS stream, step, end_ns - start_ns AS ns,
                                    name_id, op, coalesce(fusible, FALSE) AS fusible
                             FROM ({_kernels_sql(data)})
                             ORDER BY rank, device, stream, start_ns, end_ns, name_id""").fetchnumpy()
    n = len(k["ns"])
    if not n:
        return ()
    fusible = np.asarray(k["fusible"], dtype=bool)
    step_null = np.ma.getmaskarray(k["step"])
    step = np.asarray(np.ma.getdata(k["step"]), dtype=np.int64)
    # a run goes on while the kernel and the one before it on its stream are fusible, in one step
    same_stream = np.zeros(n, dtype=bool)
    same_stream[1:] = (
        (k["rank"][1:] == k["rank"][:-1])
        & (k["device"][1:] == k["device"][:-1])
        & (np.asarray(k["stream"])[1:] == np.asarray(k["stream"])[:-1])
    )
    same_step = np.zeros(n, dtype=bool)
    same_step[1:] = (step_null[1:] & step_null[:-1]) | (~step_null[1:] & ~step_null[:-1] & (step[1:] == step[:-1]))
    goes_on = np.zeros(n, dtype=bool)
    goes_on[1:] = same_stream[1:] & fusible[1:] & fusible[:-1] & same_step[1:]
    run = np.cumsum(~goes_on)
    rows_in = np.flatnonzero(fusible)
    _, first, sizes = np.unique(run[rows_in], return_index=True, return_counts=True)
    names = {r["name_id"]: r["name"] for r in data.rows(f"SELECT name_id, name FROM {kernel_names(data)}")}
    keep = sizes >= min_run
    starts, lens = first[keep], sizes[keep]
    # the kept runs' rows, run after run (a run's fusible rows are consecutive), and where each run begins
    # among them: the sums per run are reductions over those offsets, not a numpy call per run
    offsets = np.cumsum(lens) - lens
    rows = rows_in[np.repeat(starts, lens) + np.arange(int(lens.sum())) - np.repeat(offsets, lens)]
    ns = np.asarray(k["ns"], dtype=np.int64)[rows]
    run_ns = np.add.reduceat(ns, offsets) if len(rows) else np.zeros(0, np.int64)
    run_max = np.maximum.reduceat(ns, offsets) if len(rows) else np.zeros(0, np.int64)
    seq_names = [names[i] for i in k["name_id"][rows].tolist()]
    ops = k["op"][rows].tolist()  # None where NULL (a masked array's tolist)
    first_rows = rows[offsets]
    run_steps = [None if null else s for null, s in zip(step_null[first_rows].tolist(), step[first_rows].tolist())]
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for lo, n, total, longest, run_step in zip(
        offsets.tolist(), lens.tolist(), run_ns.tolist(), run_max.tolist(), run_steps
    ):
        seq = tuple(seq_names[lo : lo + n])
        g = groups.setdefault(seq, {"runs": 0, "ns": 0, "fusable": 0, "ops": set(), "steps": set()})
        g["runs"] += 1
        g["ns"] += total
        g["fusable"] += total - longest
        g["ops"].update(o for o in ops[lo : lo + n] if o is not None)
        g["steps"].add(run_step)
    out = [
        KernelSequence(
            seq,
            g["runs"] / w,
            len(seq),
            g["ns"] / 1e6 / w,
            g["fusable"] / 1e6 / w,
            tuple(sorted(g["ops"])),
            tuple(sorted(x for x in g["steps"] if x is not None)),
        )
        for seq, g in groups.items()
    ]
    return tuple(sorted(out, key=lambda s: (-s.fusable_ms_per_step, s.names)))
