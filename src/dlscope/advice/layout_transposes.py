"""layout_transposes: kernels that convert tensors between NCHW and NHWC around convolutions.

Tensor-core convolutions want NHWC (channels last); a model kept in PyTorch's default NCHW makes
cuDNN transpose inputs, weights and gradients before and after each convolution
(``nchwToNhwcKernel`` / ``nhwcToNchwKernel``).

Saving (upper bound): the time of those conversion kernels per step, capped by the time the host
waited for the GPU. With the model and its input in channels_last they are not needed.
"""

from __future__ import annotations

from ..analysis.kernel_names import kernel_names, kernel_op_join
from ..analysis.replay import Fix
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, kernel_label, merge_rows, ms, op_label, steps

# (pattern, example) -- layout conversion kernels
LAYOUT_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"nchwtonhwc|nhwctonchw", "cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>"),
    (r"nchw2nhwc|nhwc2nchw|nchw_to_nhwc|nhwc_to_nchw", "xmma_cudnn::nchw2nhwc_kernel"),
)
LAYOUT_RE = "|".join(f"({p})" for p, _ in LAYOUT_PATTERNS)
TOP = 5
URL = "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html"
URL_CUDA = "https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout"


class LayoutTransposes(Rule):
    id = "layout_transposes"
    title = "Tensors are converted between NCHW and NHWC around convolutions"
    description = "layout-conversion kernels (nchwToNhwc, nhwcToNchw) run around convolutions: channels_last avoids them"
    needs = ("kernels",)
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        d, b = ctx.data, ctx.basis
        rows = d.rows(f"""
            SELECT o.name AS op, k.name AS kernel, count(*)::DOUBLE / {b.windows} AS calls_per_step,
                   sum(k.end_ns - k.start_ns)::DOUBLE / 1e6 / {b.windows} AS ms_per_step,
                   list(DISTINCT k.step ORDER BY k.step) AS steps
            FROM kernels k SEMI JOIN (SELECT name_id FROM {kernel_names(d)}
                                      WHERE regexp_matches(lower(name), '{LAYOUT_RE}')) n ON n.name_id = k.name_id
            {ctx.in_windows('k')} {kernel_op_join(d)}
            GROUP BY ALL ORDER BY ms_per_step DESC""")
        t = sum(r["ms_per_step"] for r in rows)
        judged = ctx.judge_gpu_cut(t, MIN_SAVING_PCT) if rows else None
        if judged is None:
            return None
        saving, cap_note = judged
        for r in rows:
            r["op"], r["kernel"], r["steps"] = op_label(r["op"]), kernel_label(r["kernel"]), steps(r["steps"] or [])
        rows = merge_rows(rows, ("op", "kernel"), ("calls_per_step", "ms_per_step"))
        n = sum(r["calls_per_step"] for r in rows)
        to_nhwc = sum(r["calls_per_step"] for r in rows if "tonhwc" in r["kernel"].lower() or "2nhwc" in r["kernel"].lower())
        text = (f"{count(n)} layout conversions per step take {ms(t)} of GPU time ({count(to_nhwc)} NCHW to NHWC, "
                f"{count(n - to_nhwc)} back), launched by " + ", ".join(sorted({r['op'] or '?' for r in rows[:3]})))
        how = (f"in channels_last the conversions disappear: up to {ms(saving)} per step"
               + (f" ({cap_note})" if cap_note else ""))
        if ctx.facts.torch:
            advice = ("Keep activations in channels_last so cuDNN needs no conversion: model = "
                      "model.to(memory_format=torch.channels_last) and, for each batch, x = "
                      "x.to('cuda', memory_format=torch.channels_last, non_blocking=True). It pays most together with "
                      "bf16 autocast (tensor cores prefer NHWC).")
        else:
            advice = ("Store activations and filters in NHWC (CUDNN_TENSOR_NHWC) so cuDNN's tensor-core kernels use them "
                      "as they are instead of converting before and after each convolution.")
        return self.finding(ctx, saving, Evidence(text, how, rows[:TOP]), advice, url=URL if ctx.facts.torch else URL_CUDA)

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(self.id, "no layout conversion kernels (channels_last)", gpu={"layout_ns": 0.0},
                   drop_calls_of=("layout_ns",))



RULE = LayoutTransposes()
