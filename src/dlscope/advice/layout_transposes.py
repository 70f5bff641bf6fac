"""layout_transposes: kernels that convert tensors between NCHW and NHWC around convolutions.

Tensor-core convolutions want NHWC (channels last); a model kept in PyTorch's default NCHW makes
cuDNN transpose inputs, weights and gradients before and after each convolution
(``nchwToNhwcKernel`` / ``nhwcToNchwKernel``).

Saving (upper bound): the time of those conversion kernels per step, capped by the time the host
waited for the GPU. With the model and its input in channels_last they are not needed.
"""

from __future__ import annotations

from typing import Any

from ..analysis.measures.layouts import layout_conversions
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, kernel_label, merge_rows, ms, op_label, steps

TOP = 5
URL = "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"
URL_CUDA = "https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout"


class LayoutTransposes(Rule):
    id = RuleId.LAYOUT_TRANSPOSES
    title = "Tensors are converted between NCHW and NHWC around convolutions"
    description = (
        "layout-conversion kernels (nchwToNhwc, nhwcToNchw) run around convolutions: channels_last avoids them"
    )
    needs = ("kernels",)
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        conversions = layout_conversions(ctx.data)
        t = sum(c.ms_per_step for c in conversions)
        judged = ctx.judge_gpu_cut(t, MIN_SAVING_PCT) if conversions else None
        if judged is None:
            return None
        saving, cap_note = judged
        rows: list[dict[str, Any]] = [
            {
                "op": op_label(c.op),
                "kernel": kernel_label(c.kernel),
                "calls_per_step": c.calls_per_step,
                "ms_per_step": c.ms_per_step,
                "steps": steps(c.steps),
            }
            for c in conversions
        ]
        rows = merge_rows(rows, ("op", "kernel"), ("calls_per_step", "ms_per_step"))
        n = sum(r["calls_per_step"] for r in rows)
        to_nhwc = sum(
            r["calls_per_step"] for r in rows if "tonhwc" in r["kernel"].lower() or "2nhwc" in r["kernel"].lower()
        )
        text = (
            f"{count(n)} layout conversions per step take {ms(t)} of GPU time ({count(to_nhwc)} NCHW to NHWC, "
            f"{count(n - to_nhwc)} back), launched by " + ", ".join(sorted({r["op"] or "?" for r in rows[:3]}))
        )
        how = f"in channels_last the conversions disappear: up to {ms(saving)} per step" + (
            f" ({cap_note})" if cap_note else ""
        )
        if ctx.facts.torch:
            advice = (
                "Keep activations in channels_last so cuDNN needs no conversion: model = "
                "model.to(memory_format=torch.channels_last) and, for each batch, x = "
                "x.to('cuda', memory_format=torch.channels_last, non_blocking=True). It pays most together with "
                "bf16 autocast (tensor cores prefer NHWC)."
            )
        else:
            advice = (
                "Store activations and filters in NHWC (CUDNN_TENSOR_NHWC) so cuDNN's tensor-core kernels use them "
                "as they are instead of converting before and after each convolution."
            )
        return self.finding(
            ctx, saving, Evidence(text, how, rows[:TOP]), advice, url=URL if ctx.facts.torch else URL_CUDA
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(
            self.id,
            "no layout conversion kernels (channels_last)",
            gpu={"layout_ns": 0.0},
            drop_calls_of=("layout_ns",),
        )


RULE = LayoutTransposes()
