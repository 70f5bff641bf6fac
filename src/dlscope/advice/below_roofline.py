"""below_roofline: the ops that take the most kernel time run far below their roofline.

Measured (:mod:`dlscope.analysis.measures.roofline_gaps`, from the roofline report): per op name and
input shapes, the FLOPs and bytes the performance model counts from the recorded shapes, against the
GPU's datasheet peaks; an op whose kernels reach under the report's target share of that roofline
(``TARGET_PCT``, 70%: what well-tuned kernels reach) has the time above the target to give back. Ops
the model does not know are never guessed at.

Saving (upper bound): that kernel time, summed over the ops under the target; the step shrinks by at
most what the host waited for the GPU (:meth:`.context.Context.gpu_saving_cap`).

The likely cause is named from the shape and the kernels where they show one, in this order:
attention run as matrix products and a softmax (scaled_dot_product_attention's math path: no fused
kernel took the inputs), fp32 attention (no flash kernel), fp32 matrix math on CUDA cores, a matrix
product whose K or N is not a multiple of the tensor cores' alignment, tiny batched matrix products.
Other ops get no cause.
"""

from __future__ import annotations

import enum
from typing import Any

from ..analysis.core.context import ProfileData
from ..analysis.measures.roofline_gaps import OpGap, prefetch_roofline_gaps, roofline_gaps
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, op_label

TOP = 6
URL = "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html"
URL_SDPA = "https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html"
URL_TF32 = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"

# The dimension multiples tensor cores need to run a GEMM fully, by the precision the products run in:
# NVIDIA's Deep Learning Performance Guide, "Matrix Multiplication Background", Tensor Core Requirements
# (16 bytes of the operand: 8 fp16/bf16 elements, 16 int8/fp8, 4 tf32; with cuBLAS >= 11 other sizes
# run, less efficiently).
ALIGN: dict[str, int] = {
    "float16": 8,
    "bfloat16": 8,
    "int8": 16,
    "uint8": 16,
    "float8_e4m3fn": 16,
    "float8_e5m2": 16,
    "float8_e4m3fnuz": 16,
    "float8_e5m2fnuz": 16,
}
TF32_ALIGN = 4  # the same table's TF32 row: fp32 data on tensor cores
# A product whose output fits in one thread-block tile leaves most of the tile idle (tile quantization):
# the same guide's example tiles are 128x128 and 256x128, so under 128 in both M and N each product of a
# batch is one partly filled tile.
TILE = 128


class Cause(enum.Enum):
    """What the shape and the kernels say about an op's gap (one advice each)."""

    SDPA_MATH = "sdpa_math"
    FP32_ATTENTION = "fp32_attention"
    FP32_CUDA_CORES = "fp32_cuda_cores"
    ALIGNMENT = "alignment"
    TINY_BATCHED = "tiny_batched"


def diagnose(g: OpGap) -> tuple[Cause, str] | None:
    """The likely cause of ``g``'s gap and its words, from its shape and kernels; None where neither shows one."""
    if g.sdpa_math:
        return Cause.SDPA_MATH, "attention without a fused kernel (SDPA math path: matrix products and a softmax)"
    if g.kind == "attention" and g.dtype == "float32":
        return Cause.FP32_ATTENTION, "fp32 attention (the flash kernel takes fp16/bf16 only)"
    if g.kind in ("gemm", "conv") and g.dtype == "float32" and not g.tensor_cores:
        return Cause.FP32_CUDA_CORES, "fp32 matrix math on CUDA cores (no TF32 or bf16)"
    if g.gemm is not None:
        m, n, k, batch = g.gemm
        align = ALIGN.get(g.dtype) or (TF32_ALIGN if g.dtype == "float32" and g.tensor_cores else None)
        odd = [f"{name}={v}" for name, v in (("K", k), ("N", n)) if align and v % align]
        if odd:
            return Cause.ALIGNMENT, f"{' and '.join(odd)} not a multiple of {align} ({g.dtype} on tensor cores)"
        if batch > 1 and m < TILE and n < TILE:
            return Cause.TINY_BATCHED, f"tiny batched GEMMs ({batch} products of {m}x{n}, K={k})"
    return None


def cause(g: OpGap) -> str:
    """:func:`diagnose`'s words ('' where there is no cause)."""
    found = diagnose(g)
    return found[1] if found else ""


ADVICE: dict[Cause, tuple[str, str]] = {
    Cause.SDPA_MATH: (
        "Attention ran on scaled_dot_product_attention's math path: give it inputs a fused kernel takes "
        "(fp16/bf16 for flash attention, a head dim that is a multiple of 8); run it once under "
        "torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) and the warnings say why each fused kernel "
        "refused.",
        URL_SDPA,
    ),
    Cause.FP32_ATTENTION: (
        "Attention runs in fp32, which scaled_dot_product_attention's flash kernel does not take: run the model "
        "under torch.autocast('cuda', dtype=torch.bfloat16).",
        URL_SDPA,
    ),
    Cause.FP32_CUDA_CORES: (
        "fp32 matrix math runs on CUDA cores: allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True) or run "
        "it under bf16 autocast.",
        URL_TF32,
    ),
    Cause.ALIGNMENT: (
        "Pad the matrix products' K and N (a Linear's in_features and out_features, a vocabulary, a hidden size) "
        "to a multiple of 8 for fp16/bf16 (16 for 8-bit types, 4 for TF32): the tensor cores then run the whole "
        "product.",
        URL,
    ),
    Cause.TINY_BATCHED: (
        "The batched products are too small to fill a tile each: merge them into fewer, larger products "
        "(concatenate heads or groups into one matmul), or let torch.compile fuse them.",
        URL,
    ),
}
NO_CAUSE = (
    "These ops' kernels reach little of what the GPU can do for their work: check their shapes (small tensors "
    "are launch-bound), fuse the memory-bound ones (torch.compile), and see 'dlscope stats --report roofline' "
    "for every op's share of its roofline."
)


def _advice(causes: list[Cause]) -> tuple[str, str]:
    """What to change for the causes named (most saving first, each once), and the page that says more."""
    parts = [ADVICE[c] for c in dict.fromkeys(causes)]
    if not parts:
        return NO_CAUSE, URL
    return " ".join(text for text, _ in parts), parts[0][1]


class BelowRoofline(Rule):
    id = RuleId.BELOW_ROOFLINE
    title = "Ops run far below their roofline"
    description = (
        "the ops with the most kernel time reach under the target share of their roofline "
        "(FLOPs and bytes from the recorded shapes against the GPU's peaks)"
    )
    url = URL
    needs = ("ops", "kernels")
    needs_gpu = True
    no_try_fix = (
        "the fix is a shape or kernel change in the user's model (pad K/N to a multiple of 8, a fused attention "
        "kernel): nothing to inject"
    )

    def precondition(self, ctx: Context) -> str | None:
        gaps = roofline_gaps(ctx.data)
        return gaps.why_not

    def prefetch(self, data: ProfileData) -> None:
        # the roofline's queries (130-180 ms on the 504k-event profile) overlap the rules before this one
        prefetch_roofline_gaps(data)

    def check(self, ctx: Context) -> Finding | None:
        gaps = roofline_gaps(ctx.data)
        if not gaps.ops:
            return None
        cut = sum(g.saving_ms_per_step for g in gaps.ops)
        judged = ctx.judge_gpu_cut(cut, MIN_SAVING_PCT)
        if judged is None:
            return None
        saving, cap_note = judged
        found = [diagnose(g) for g in gaps.ops]
        rows: list[dict[str, Any]] = [
            {
                "op": op_label(g.op),
                "input_shapes": g.input_shapes,
                "dtype": g.dtype,
                "detail": g.detail,
                "peak": g.peak,
                "calls_per_step": g.calls_per_step,
                "ms_per_step": g.ms_per_step,
                "peak_pct": g.peak_pct,
                "saving_ms_per_step": g.saving_ms_per_step,
                "cause": d[1] if d else "",
            }
            for g, d in zip(gaps.ops, found)
        ]
        top = rows[0]
        named = [d[0] for d in found[:TOP] if d is not None]
        per = self.per_step_phrase(ctx)  # without steps, the roofline's figures are over the profile
        text = (
            f"{len(rows)} op shape{'s' if len(rows) != 1 else ''} ran under {gaps.target_pct:g}% of the roofline, "
            f"{ms(sum(g.ms_per_step for g in gaps.ops))} of kernel time {per}; the most to win: {top['op']} "
            f"({top['detail'] or top['input_shapes']}) at {top['peak_pct']:.1f}% of its {top['peak']} roofline, "
            f"{ms(top['ms_per_step'])} {per}" + (f", likely cause: {top['cause']}" if top["cause"] else "")
        )
        how = (
            f"each op at {gaps.target_pct:g}% of its roofline (what well-tuned kernels reach) takes "
            f"{ms(cut)} less kernel time {per}" + (f", {cap_note}" if cap_note else "") + f"; up to {ms(saving)} {per}"
        )
        advice, url = _advice(named)
        return self.finding(ctx, saving, Evidence(text, how, rows[:TOP]), advice, url=url)


RULE = BelowRoofline()
