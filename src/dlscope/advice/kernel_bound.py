"""kernel_bound: what limits the costliest kernels, from Nsight Compute's measurements.

Where ``dlscope ncu`` (or an imported ncu CSV) measured kernels, each is memory-bound, compute-
bound or latency-bound by ncu's Speed-Of-Light rule (:mod:`dlscope.analysis.reports.kernel_metrics`). A
kernel whose bottleneck unit runs at ``u``% of its peak can at best run ``1 - u/100`` faster
without changing the work it does.

Saving (upper bound): per profiled kernel, its time per step times that headroom, summed; capped
by the time the host waited for the GPU. Advice follows the class of the kernels that cost most.
"""

from __future__ import annotations

from typing import Any

from ..analysis.reports.kernel_metrics import LATENCY_PCT
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import kernel_label, ms

TOP = 5
URL = "https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html#roofline"
ADVICE = {
    "memory": (
        "Memory-bound kernels move more bytes than their math needs: fuse the elementwise work around them "
        "(torch.compile, jax.jit, XLA fusion) so intermediates stay on chip, and store activations in "
        "bf16/fp16 to halve the bytes."
    ),
    "compute": (
        "Compute-bound kernels are limited by arithmetic: run their matrix math on tensor cores in a lower "
        "precision (bf16/fp16 autocast, TF32 for fp32), and check the tensor pipe column of "
        "'dlscope stats --report kernel_metrics'."
    ),
    "latency": (
        f"Latency-bound kernels use under {LATENCY_PCT:.0f}% of both compute and memory: they lack parallel "
        "work (small grids, low occupancy) or stall; give each launch more work (a larger batch, fused "
        "small kernels, CUDA graphs) and check the achieved occupancy against the theoretical one."
    ),
}


class KernelBound(Rule):
    id = RuleId.KERNEL_BOUND
    no_try_fix = "the kernels' own code (Nsight Compute's sections say what limits them): nothing to inject"
    title = "The costliest kernels are limited by memory, compute or latency"
    description = "Nsight Compute's verdict on the profiled kernels and their headroom to the roofline"
    url = URL
    needs = ("kernels", "kernel_metrics")
    needs_gpu = True

    def check(self, ctx: Context) -> Finding | None:
        # a kernel whose bottleneck unit runs at u% of its peak can at best run 1 - u/100 faster
        from ..analysis.measures.kernel_metrics import profiled_kernels

        rows: list[dict[str, Any]] = [
            {
                "kernel": k.kernel,
                "ms_per_step": k.ms_per_step,
                "sm_pct": k.sm_pct,
                "memory_pct": k.memory_pct,
                "occupancy_pct": k.occupancy_pct,
                "tensor_pct": k.tensor_pct,
                "bound": k.bound,
                "headroom_ms": k.ms_per_step * max(0.0, 1 - max(k.sm_pct, k.memory_pct) / 100),
            }
            for k in profiled_kernels(ctx.data)
        ]
        if not rows:
            return None
        cut = sum(r["headroom_ms"] for r in rows)
        judged = ctx.judge_gpu_cut(cut, MIN_SAVING_PCT)
        if judged is None:
            return None
        saving, cap_note = judged
        by_bound: dict[str, float] = {}
        for r in rows:
            by_bound[r["bound"]] = by_bound.get(r["bound"], 0.0) + r["ms_per_step"]
            r["kernel"] = kernel_label(r["kernel"])
        main = max(by_bound, key=lambda k: by_bound[k])
        parts = ", ".join(
            f"{sum(1 for r in rows if r['bound'] == k)} {k}-bound ({ms(v)} per step)"
            for k, v in sorted(by_bound.items(), key=lambda kv: -kv[1])
        )
        text = (
            f"Nsight Compute measured {len(rows)} of the profile's kernels: {parts}; the costliest, "
            f"{rows[0]['kernel']}, is {rows[0]['bound']}-bound (SM {rows[0]['sm_pct']:.0f}%, memory "
            f"{rows[0]['memory_pct']:.0f}% of peak)"
        )
        how = (
            f"each kernel at most reaches the peak of its bottleneck unit: up to {ms(saving)} "
            f"{self.per_step_phrase(ctx)}" + (f" ({cap_note})" if cap_note else "")
        )
        advice = ADVICE[main]
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows[:TOP]),
            advice,
            title=f"The costliest profiled kernels are {main}-bound",
        )


RULE = KernelBound()
