"""fusion_candidates: frequent runs of short elementwise and reduction kernels, one after the
other on a stream: each reads its input from and writes its output to GPU memory, where one fused
kernel would keep the intermediates in registers (HTA's kernel-sequence analysis,
``get_frequent_cuda_kernel_sequences``).

Measured (:mod:`dlscope.analysis.measures.kernel_sequences`): maximal runs of consecutive
fusible kernels on one stream within a step (ATen's native elementwise, reduction and
normalization kernels; matrix math and the optimizer's kernels left out), grouped by their kernel
sequence; how often each sequence occurs per step and its time.

Saving (upper bound): per occurrence, the run's time minus its longest kernel: a fused kernel
still does at least the work of the largest member. Capped by the time the host waited for the
GPU (fusion saves GPU time). Fewer launches also help a launch-bound step; launch_bound says so.
"""

from __future__ import annotations

from typing import Any

from ..analysis.measures.kernel_sequences import kernel_sequences
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, kernel_label, ms, op_label, steps

# HTA's get_frequent_cuda_kernel_sequences looks for sequences of at least 3 kernels
# (min_pattern_len=3) and reports the top 5 (top_k=5).
MIN_RUN = 3
TOP = 5
URL_TORCH = "https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html"
URL_CUDA = "https://github.com/facebookresearch/HolisticTraceAnalysis"


class FusionCandidates(Rule):
    id = RuleId.FUSION_CANDIDATES
    title = "Chains of small elementwise kernels could be fused"
    description = (
        "frequent sequences of short elementwise/reduction kernels run one after another (torch.compile fuses them)"
    )
    needs = ("kernels",)
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        rows = kernel_sequences(ctx.data, MIN_RUN)
        gpu_saving = sum(r.fusable_ms_per_step for r in rows)
        judged = ctx.judge_gpu_cut(gpu_saving, MIN_SAVING_PCT) if rows else None
        if judged is None:
            return None
        saving, cap_note = judged
        out: list[dict[str, Any]] = [
            {
                "sequence": _sequence(r.names),
                "kernels": r.kernels,
                "per_step": r.per_step,
                "ms_per_step": r.ms_per_step,
                "fusable_ms_per_step": r.fusable_ms_per_step,
                "ops": ", ".join(sorted({label for o in r.ops if o and (label := op_label(o))})[:4]),
                "steps": steps(r.steps),
            }
            for r in rows[:TOP]
        ]
        n_runs = sum(r.per_step for r in rows)
        text = (
            f"{count(n_runs)} runs of {MIN_RUN} or more back-to-back elementwise/reduction kernels per step "
            f"({len(rows)} distinct sequences) take {ms(sum(r.ms_per_step for r in rows))}; the most costly: "
            f"{out[0]['sequence']} ({count(out[0]['per_step'])} per step"
            + (f", from {out[0]['ops']}" if out[0]["ops"] else "")
            + ")"
        )
        how = (
            "a fused kernel still does the work of the longest kernel in each run: the kernels could take "
            f"{ms(gpu_saving)} less per step" + (f", {cap_note}" if cap_note else "") + f"; up to {ms(saving)}"
        )
        return self.finding(
            ctx, saving, Evidence(text, how, out), _advice(ctx), url=URL_TORCH if ctx.facts.torch else URL_CUDA
        )


def _sequence(names: tuple[str, ...]) -> str:
    """'elementwise add > reduce sum x3 > ...': labels, repeats folded."""
    labels = [kernel_label(n, 36) for n in names]
    parts: list[list[Any]] = []
    for lab in labels:
        if parts and parts[-1][0] == lab:
            parts[-1][1] += 1
        else:
            parts.append([lab, 1])
    return " > ".join(f"{lab} x{n}" if n > 1 else lab for lab, n in parts)


def _advice(ctx: Context) -> str:
    f = ctx.facts
    if not f.torch:
        return (
            "Fuse these kernels: write one kernel for the chain (or use a library epilogue such as cuBLASLt/CUTLASS "
            "epilogue fusion) so intermediates stay in registers instead of round-tripping through GPU memory."
        )
    if f.compiled:
        return (
            "torch.compile is in use, yet these chains still run as separate eager kernels: they sit outside the "
            "compiled region or behind graph breaks; torch._dynamo.explain(model)(inputs) lists the breaks."
        )
    return (
        "Compile the model: model = torch.compile(model). Inductor fuses chains of elementwise and reduction ops "
        "(including those of the backward pass) into single kernels; the first steps compile, the rest run fused."
    )


RULE = FusionCandidates()
