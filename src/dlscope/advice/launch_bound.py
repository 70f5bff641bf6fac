"""launch_bound: the GPU runs out of work while the host is still launching it (many short
kernels; the CPU cannot keep the GPU fed).

Measured: the GPU idle time per step while the host was busy with recorded work and the GPU's
queue was empty (``launch`` in :mod:`dlscope.analysis.core.step_idle`); kernels per step, their median
duration against the median host cost of one launch call (as :mod:`dlscope.analysis.reports.launch_sum`),
and the ops that launch the most kernels.

Saving (upper bound): that idle time. If every launch were free (one CUDA-graph replay per step)
the GPU would never wait for the host; it cannot save more than the GPU waited. Measured with the
profiler on, which slows the host's launches: the untraced program is less launch-bound.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..analysis.core.host_classes import HostClass
from ..analysis.measures.launches import kernel_launches, passes_host_ms, top_launching_ops
from ..analysis.models.replay import Fix
from ..analysis.reports.launch_sum import small_kernel_threshold_ns
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import count, ms, op_label, pct, steps

# XProf calls a program moderately kernel-launch bound from 3% of the step time
# (input_pipeline_analysis.cc: kModeratelyKernelLaunchBoundThresholdInPercent).
MIN_SAVING_PCT = 3.0
TOP_OPS = 5
# What is left of the host's work in the forward and backward passes when torch.compile replays
# them as CUDA graphs (mode='reduce-overhead'): a fixed cost per compiled region, whatever its
# operator count. PyTorch's own breakdown of one compiled call with one CUDA graph (pytorch/pytorch
# issue 150488): TorchDynamo's cache lookup 176 us, the CUDA-graph tree's checks 128 us,
# cudaGraphLaunch 41 us. A training step runs the forward region (all three) and its backward (the
# tree and the launch; no Dynamo lookup): 0.51 ms.
COMPILED_HOST_MS_PER_STEP = (176 + 128 + 41 + 128 + 41) / 1e3
URL_TORCH = "https://pytorch.org/docs/stable/torch.compiler.html"
URL_CUDA = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#cuda-graphs"


class LaunchBound(Rule):
    id = RuleId.LAUNCH_BOUND
    title = "The host cannot launch kernels as fast as the GPU runs them"
    description = "the GPU idles while the host launches many short kernels"
    needs = ("kernels", "api")
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        b = ctx.basis
        share = ctx.idle_share("launch_ns")
        saving = share * b.unit_ms
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        launch_ns, measured = small_kernel_threshold_ns(ctx.data)
        k = kernel_launches(ctx.data, launch_ns)
        if k.median_ns is None:  # no kernel in the windows (a damaged profile): nothing launched to judge
            return None
        rows = _top_ops(ctx, launch_ns)
        per = self.per_step_phrase(ctx)
        text = (
            f"the GPU waited {ms(saving)} {per} ({pct(p)}) for the host to launch work; "
            f"{count(k.per_step)} kernels {per}, median {k.median_ns / 1e3:.1f} us, "
            f"{pct(100 * (k.short_share or 0))} of them shorter than one launch call on the host "
            f"({launch_ns / 1e3:.1f} us{'' if measured else ', assumed'})"
        )
        how = (
            f"the GPU's queue ran dry while the host was busy {pct(p)} of the time; if launching cost nothing,"
            f" {'each step' if b.has_steps else 'the profile'} could be up to {ms(saving)} shorter (measured with the"
            " profiler on, which slows launches)"
        )
        return self.finding(
            ctx, saving, Evidence(text, how, rows), _advice(ctx, rows), url=URL_TORCH if ctx.facts.torch else URL_CUDA
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        passes_ms = passes_host_ms(ctx.data)
        share = min(1.0, COMPILED_HOST_MS_PER_STEP / passes_ms) if passes_ms else 1.0
        return Fix(
            self.id,
            "the model's forward and backward compiled and replayed as CUDA graphs: their host work "
            f"{'of ' + ms(passes_ms) + ' per step ' if passes_ms else ''}becomes a fixed "
            f"{ms(COMPILED_HOST_MS_PER_STEP)} (Dynamo's guards, the graph tree's checks, two graph launches)",
            host={HostClass.MODEL: share},
        )


def _top_ops(ctx: Context, short_ns: int) -> list[dict[str, Any]]:
    """The outermost ops launching the most kernels per step, as evidence rows."""
    return [
        {**asdict(o), "op": op_label(o.op), "steps": steps(o.steps)}
        for o in top_launching_ops(ctx.data, short_ns, TOP_OPS)
    ]


def _advice(ctx: Context, rows: list[dict[str, Any]]) -> str:
    f = ctx.facts
    if not f.torch:
        return (
            "Capture the iteration once in a CUDA graph (cudaStreamBeginCapture ... cudaGraphInstantiate) and "
            "replay it with cudaGraphLaunch: one launch per step instead of one per kernel; fuse short kernels "
            "and give each kernel more work (a larger batch)."
        )
    top = ", ".join(f"{r['op']} ({count(r['kernels_per_step'])}/step)" for r in rows[:3])
    where = f" The most launches come from {top}." if top else ""
    if f.cuda_graphs:
        return (
            "The program already replays CUDA graphs, yet the GPU still waits for launches outside them: widen "
            "the captured region (torch.compile(mode='reduce-overhead') around the whole step, no graph breaks), "
            f"or raise the batch size so each kernel runs longer.{where}"
        )
    if f.compiled:
        return (
            "torch.compile is in use, but the GPU still waits for launches: compile with "
            "mode='reduce-overhead' (CUDA graphs replay the step with one launch), remove graph breaks "
            f"(torch._dynamo.explain), or raise the batch size so each kernel runs longer.{where}"
        )
    return (
        "Launch fewer, larger kernels: model = torch.compile(model) fuses elementwise chains into single kernels, "
        "and torch.compile(model, mode='reduce-overhead') also replays each step as a CUDA graph (one launch "
        "instead of hundreds). A larger batch makes every kernel longer at the same launch cost; "
        f"a fused optimizer (fused=True) removes the optimizer's launches.{where}"
    )


RULE = LaunchBound()
