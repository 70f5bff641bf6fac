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
        d, b = ctx.data, ctx.basis
        rows = d.rows(f"""
            WITH k AS ({_kernels_sql(ctx)}),
                 s AS (SELECT *, lag(fusible) OVER w AS pf, lag(step) OVER w AS ps
                       FROM k WINDOW w AS (PARTITION BY rank, device, stream ORDER BY start_ns)),
                 r AS (SELECT *, sum(CASE WHEN fusible AND coalesce(pf, FALSE) AND ps IS NOT DISTINCT FROM step
                                          THEN 0 ELSE 1 END)
                                 OVER (PARTITION BY rank, device, stream ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS run
                       FROM s),
                 runs AS (SELECT rank, device, stream, run, any_value(step) AS step, count(*) AS n,
                                 sum(end_ns - start_ns) AS ns, max(end_ns - start_ns) AS max_ns,
                                 list(name ORDER BY start_ns) AS names, list(DISTINCT op) AS ops
                          FROM r WHERE fusible GROUP BY ALL HAVING count(*) >= {MIN_RUN})
            SELECT names, count(*)::DOUBLE / {b.windows} AS per_step, any_value(n) AS kernels,
                   sum(ns)::DOUBLE / 1e6 / {b.windows} AS ms_per_step,
                   sum(ns - max_ns)::DOUBLE / 1e6 / {b.windows} AS fusable_ms_per_step,
                   flatten(list(ops)) AS ops, list(DISTINCT step ORDER BY step) AS steps
            FROM runs GROUP BY names ORDER BY fusable_ms_per_step DESC""")
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
                      o.name AS op, f.fusible AND NOT {in_opt} AS fusible
               FROM kernels k JOIN {fusible} f ON f.name_id = k.name_id {ctx.in_windows('k')} {opt_join}
               {kernel_op_join(d)}"""


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
