"""fusion_candidates: frequent runs of short elementwise and reduction kernels, one after the
other on a stream: each reads its input from and writes its output to GPU memory, where one fused
kernel would keep the intermediates in registers (HTA's kernel-sequence analysis,
``get_frequent_cuda_kernel_sequences``).

Measured: maximal runs of consecutive fusible kernels on one stream within a step (ATen's native
elementwise, reduction and normalization kernels; matrix math and the optimizer's kernels left
out), grouped by their kernel sequence; how often each sequence occurs per step and its time.

Saving (upper bound): per occurrence, the run's time minus its longest kernel: a fused kernel
still does at least the work of the largest member. Capped by the time the host waited for the
GPU (fusion saves GPU time). Fewer launches also help a launch-bound step; launch_bound says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.kernel_names import kernel_names, kernel_op_join
from ..analysis.math_kernels import precision_sql
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, kernel_label, ms, op_label, steps

# HTA's get_frequent_cuda_kernel_sequences looks for sequences of at least 3 kernels
# (min_pattern_len=3) and reports the top 5 (top_k=5).
MIN_RUN = 3
TOP = 5
OPTIMIZER_PHASE_SQL = "(name LIKE 'Optimizer.step#%' OR name = 'optimizer')"
URL_TORCH = "https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html"
URL_CUDA = "https://github.com/facebookresearch/HolisticTraceAnalysis"


class FusionCandidates(Rule):
    id = "fusion_candidates"
    title = "Chains of small elementwise kernels could be fused"
    description = "frequent sequences of short elementwise/reduction kernels run one after another (torch.compile fuses them)"
    needs = ("kernels",)
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        rows = _sequences(ctx)
        gpu_saving = sum(r["fusable_ms_per_step"] for r in rows)
        judged = ctx.judge_gpu_cut(gpu_saving, MIN_SAVING_PCT) if rows else None
        if judged is None:
            return None
        saving, cap_note = judged
        out = [{"sequence": _sequence(r["names"]), "kernels": r["kernels"], "per_step": r["per_step"],
                "ms_per_step": r["ms_per_step"], "fusable_ms_per_step": r["fusable_ms_per_step"],
                "ops": ", ".join(sorted({op_label(o) for o in r["ops"] if o})[:4]), "steps": steps(r["steps"] or [])}
               for r in rows[:TOP]]
        n_runs = sum(r["per_step"] for r in rows)
        text = (f"{count(n_runs)} runs of {MIN_RUN} or more back-to-back elementwise/reduction kernels per step "
                f"({len(rows)} distinct sequences) take {ms(sum(r['ms_per_step'] for r in rows))}; the most costly: "
                f"{out[0]['sequence']} ({count(out[0]['per_step'])} per step"
                + (f", from {out[0]['ops']}" if out[0]["ops"] else "") + ")")
        how = (f"a fused kernel still does the work of the longest kernel in each run: the kernels could take "
               f"{ms(gpu_saving)} less per step" + (f", {cap_note}" if cap_note else "") + f"; up to {ms(saving)}")
        return self.finding(ctx, saving, Evidence(text, how, out), _advice(ctx),
                            url=URL_TORCH if ctx.facts.torch else URL_CUDA)


def fusible_sql(col: str) -> str:
    """SQL: ATen's own elementwise, reduction and normalization kernels (not matrix math, not the
    foreach optimizer kernels)."""
    return (f"({col} LIKE '%at::native::%' AND {col} NOT LIKE '%multi_tensor_apply%' "
            f"AND {precision_sql(col)} IS NULL)")


def _kernels_sql(ctx: Context) -> str:
    """Kernels of the GPU windows with ``fusible`` (optimizer kernels excluded), the launching op."""
    d = ctx.data
    # judged per distinct name (see analysis.kernel_names)
    fusible = f"(SELECT name_id, {fusible_sql('name')} AS fusible FROM {kernel_names(d)})"
    in_opt = "FALSE"
    opt_join = ""
    if d.has("phases") and d.has("api"):
        opt_join = f"""LEFT JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
                       ASOF LEFT JOIN (SELECT rank, start_ns, end_ns FROM phases
                                       WHERE kind = 'range' AND {OPTIMIZER_PHASE_SQL}) p
                         ON p.rank = k.rank AND coalesce(a.start_ns, k.start_ns) >= p.start_ns"""
        in_opt = "coalesce(p.end_ns > coalesce(a.start_ns, k.start_ns), FALSE)"
    return f"""SELECT k.rank, coalesce(k.device, -1) AS device, k.stream, k.step, k.start_ns, k.end_ns, k.name,
                      k.name_id, o.name AS op, f.fusible AND NOT {in_opt} AS fusible
               FROM kernels k JOIN {fusible} f ON f.name_id = k.name_id {ctx.in_windows('k')} {opt_join}
               {kernel_op_join(d)}"""


def _sequences(ctx: Context) -> list[dict[str, Any]]:
    """The runs of ``MIN_RUN`` or more consecutive fusible kernels on one stream within a step,
    grouped by their kernel sequence, most fusable time first: ``names``, ``per_step``,
    ``kernels``, ``ms_per_step``, ``fusable_ms_per_step``, ``ops``, ``steps``.

    The kernels come from SQL in stream order; the runs are found in numpy and grouped in Python
    (a few thousand runs): two window functions and two groupings over lists of names cost
    five times as much in SQL on a 500k-event profile."""
    d, w = ctx.data, ctx.basis.windows
    k = d.con.execute(f"""SELECT rank, device, coalesce(stream, -1) AS stream, step, end_ns - start_ns AS ns, name_id,
                                 op, coalesce(fusible, FALSE) AS fusible
                          FROM ({_kernels_sql(ctx)}) ORDER BY rank, device, stream, start_ns, end_ns, name_id""").fetchnumpy()
    n = len(k["ns"])
    if not n:
        return []
    fusible = np.asarray(k["fusible"], dtype=bool)
    step_null = np.ma.getmaskarray(k["step"])
    step = np.asarray(np.ma.getdata(k["step"]), dtype=np.int64)
    # a run goes on while the kernel and the one before it on its stream are fusible, in one step
    same_stream = np.zeros(n, dtype=bool)
    same_stream[1:] = ((k["rank"][1:] == k["rank"][:-1]) & (k["device"][1:] == k["device"][:-1])
                       & (np.asarray(k["stream"])[1:] == np.asarray(k["stream"])[:-1]))
    same_step = np.zeros(n, dtype=bool)
    same_step[1:] = (step_null[1:] & step_null[:-1]) | (~step_null[1:] & ~step_null[:-1] & (step[1:] == step[:-1]))
    goes_on = np.zeros(n, dtype=bool)
    goes_on[1:] = same_stream[1:] & fusible[1:] & fusible[:-1] & same_step[1:]
    run = np.cumsum(~goes_on)
    rows_in = np.flatnonzero(fusible)
    ids, first, sizes = np.unique(run[rows_in], return_index=True, return_counts=True)
    names = {r["name_id"]: r["name"] for r in d.rows(f"SELECT name_id, name FROM {kernel_names(d)}")}
    ns = np.asarray(k["ns"], dtype=np.int64)
    ops = k["op"].tolist()  # None where NULL (a masked array's tolist)
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for start, size in zip(first[sizes >= MIN_RUN].tolist(), sizes[sizes >= MIN_RUN].tolist()):
        rows = rows_in[start:start + size]  # a run's fusible rows are consecutive
        seq = tuple(names[i] for i in k["name_id"][rows].tolist())
        g = groups.setdefault(seq, {"runs": 0, "ns": 0, "fusable": 0, "ops": set(), "steps": set()})
        run_ns = ns[rows]
        g["runs"] += 1
        g["ns"] += int(run_ns.sum())
        g["fusable"] += int(run_ns.sum() - run_ns.max())
        g["ops"].update(o for o in (ops[i] for i in rows.tolist()) if o is not None)
        g["steps"].add(None if step_null[rows[0]] else int(step[rows[0]]))
    out = [{"names": list(seq), "per_step": g["runs"] / w, "kernels": len(seq), "ms_per_step": g["ns"] / 1e6 / w,
            "fusable_ms_per_step": g["fusable"] / 1e6 / w, "ops": sorted(g["ops"]),
            "steps": sorted(x for x in g["steps"] if x is not None)}
           for seq, g in groups.items()]
    return sorted(out, key=lambda r: (-r["fusable_ms_per_step"], r["names"]))


def _sequence(names: list[str]) -> str:
    """'elementwise add > reduce sum x3 > ...': labels, repeats folded."""
    labels = [kernel_label(n, 36) for n in names]
    parts: list[list] = []
    for lab in labels:
        if parts and parts[-1][0] == lab:
            parts[-1][1] += 1
        else:
            parts.append([lab, 1])
    return " > ".join(f"{lab} x{n}" if n > 1 else lab for lab, n in parts)


def _advice(ctx: Context) -> str:
    f = ctx.facts
    if not f.torch:
        return ("Fuse these kernels: write one kernel for the chain (or use a library epilogue such as cuBLASLt/CUTLASS "
                "epilogue fusion) so intermediates stay in registers instead of round-tripping through GPU memory.")
    if f.compiled:
        return ("torch.compile is in use, yet these chains still run as separate eager kernels: they sit outside the "
                "compiled region or behind graph breaks; torch._dynamo.explain(model)(inputs) lists the breaks.")
    return ("Compile the model: model = torch.compile(model). Inductor fuses chains of elementwise and reduction ops "
            "(including those of the backward pass) into single kernels; the first steps compile, the rest run fused.")


RULE = FusionCandidates()
