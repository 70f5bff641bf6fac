"""amp_not_enabled: matrix math runs in fp32 or TF32 where bf16/fp16 autocast applies.

Measured: the time per step of GEMM, convolution and attention kernels in fp32 (CUDA cores) or
fp32 on tensor cores (TF32, 3xTF32, AMD fp32 MFMA), by launching op. Autocast runs exactly these
ops (matmul, linear, conv, attention) in 16 bits.

Saving (upper bound): each class's time times (1 - 1/S), S the peak ratio of 16-bit tensor-core
math over the path it takes now (:mod:`.hardware`: 2x over TF32, 14.8x over fp32 CUDA cores on an
H100), capped by the time the host waited for the GPU. It includes what ``no_tensor_cores``
would save on the same kernels: the two are alternatives, not additive. Autocast also halves the
memory traffic of the elementwise ops between them, which this bound leaves out.
"""

from __future__ import annotations

from typing import Any

from ..analysis.core.autocast_ops import TYPICAL_HOST_FACTOR, pass_ops
from ..analysis.core.hardware import ratios_label
from ..analysis.core.host_classes import HostClass
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .math_work import MatrixMathRule, kernel_share, math_by_kernel, ops_phrase
from .rule import MIN_SAVING_PCT
from .text import ms

TOP = 6
URL = "https://pytorch.org/docs/stable/amp.html"
URL_CUDA = "https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html"


class AmpNotEnabled(MatrixMathRule):
    id = RuleId.AMP_NOT_ENABLED
    title = "Matrix math runs in fp32/TF32 where bf16/fp16 autocast applies"
    description = "eligible GEMMs, convolutions and attention run in 32-bit precision instead of 16-bit mixed precision"

    def check(self, ctx: Context) -> Finding | None:
        rows = math_by_kernel(ctx, ("fp32", "fp32_tc"))
        dev = ctx.facts.device
        s32 = dev.low_speedup(False) if dev else 16.0
        stc = dev.low_speedup(True) if dev else 2.0
        t32 = sum(r["ms_per_step"] for r in rows if r["precision"] == "fp32")
        ttc = sum(r["ms_per_step"] for r in rows if r["precision"] == "fp32_tc")
        gpu_saving = t32 * (1 - 1 / s32) + ttc * (1 - 1 / stc)
        judged = ctx.judge_gpu_cut(gpu_saving, MIN_SAVING_PCT)
        if judged is None:
            return None
        saving, cap_note = judged
        parts = [
            f"{ms(t32)} in fp32 on CUDA cores" if t32 else "",
            f"{ms(ttc)} in TF32/fp32 on tensor cores" if ttc else "",
        ]
        text = (
            f"{ms(t32 + ttc)} of matrix math per step ({kernel_share(ctx, t32 + ttc)}) runs in 32-bit "
            f"precision ({', '.join(x for x in parts if x)}): {ops_phrase(rows)}"
        )
        how = (
            f"16-bit tensor cores peak at {stc:g}x TF32 and {s32:g}x fp32 CUDA cores on "
            f"{ratios_label(dev)}: these kernels could take {ms(gpu_saving)} less per step"
            + (f", {cap_note}" if cap_note else "")
            + f"; up to {ms(saving)} per step (not additive with no_tensor_cores)"
        )
        found = self.finding(
            ctx,
            saving,
            Evidence(text, how, rows[:TOP]),
            self._advice(ctx, rows),
            url=URL if ctx.facts.torch else URL_CUDA,
        )
        found.choice = self._choice(ctx)
        return found

    def _choice(self, ctx: Context) -> str:
        """This change in a few words, beside its alternative's (:mod:`.alternatives`)."""
        dev = ctx.facts.device
        low = "bf16" if dev is None or dev.has_bf16 else "fp16"
        if not ctx.facts.torch:
            return f"{low} inputs with fp32 accumulation: 16-bit math, precision changes more"
        scaling = "" if low == "bf16" else " and loss scaling"
        return f"{low} autocast{scaling} around the forward pass and loss: 16-bit math, precision changes more"

    def _advice(self, ctx: Context, rows: list[dict[str, Any]]) -> str:
        f = ctx.facts
        dev = f.device
        bf16 = dev is None or dev.has_bf16
        if not f.torch:
            return (
                "Compute GEMMs and convolutions in " + ("bf16" if bf16 else "fp16") + " with fp32 accumulation "
                "(cublasLt with CUDA_R_16BF inputs and CUBLAS_COMPUTE_32F), keeping fp32 master weights."
            )
        top = rows[0]["op"] or rows[0]["kernel"]
        if f.low_precision_math:
            return (
                f"Some matrix math already runs in 16 bits, but {top} and others still run in 32 bits: they run "
                "outside the torch.autocast region or on fp32 tensors created inside it with an explicit dtype. "
                "Widen the autocast block to the whole forward pass and loss."
            )
        if bf16:
            return (
                "Run the forward pass and the loss under torch.autocast('cuda', dtype=torch.bfloat16) (the "
                "backward pass follows it; bf16 needs no loss scaling). Keep the optimizer step outside."
            )
        return (
            "Run the forward pass and the loss under torch.autocast('cuda', dtype=torch.float16) and scale the "
            "loss with torch.amp.GradScaler('cuda') (this GPU has no bf16 tensor cores)."
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        dev = ctx.facts.device
        s32 = dev.low_speedup(False) if dev else 16.0
        stc = dev.low_speedup(True) if dev else 2.0
        # autocast's own host cost: the casts it adds before each matrix multiply and convolution
        ops = pass_ops(ctx.data)
        factor = ops.host_factor if ops else TYPICAL_HOST_FACTOR
        basis = (
            f"{ops.castable:.0f} of the passes' {ops.ops:.0f} operators per step are matrix math"
            if ops
            else "as on typical models"
        )
        return Fix(
            self.id,
            f"matrix math in 16 bits at the peak ratios ({stc:g}x TF32, {s32:g}x fp32), the casts "
            f"autocast adds costing {factor:.2f}x the host's forward and backward work ({basis})",
            gpu={"simt_ns": 1 / s32, "tf32_ns": 1 / stc},
            host={HostClass.MODEL: factor},
        )


RULE = AmpNotEnabled()
