"""unfused_optimizer: the optimizer step launches its arithmetic as many small kernels: one per
parameter and operation (the single-tensor "for-loop" implementation, torch.profiler's
``OptimizerSingleTensorPattern``) or one per operation over lists of parameters (``foreach``),
where a fused implementation does the whole update in one pass.

Measured (:mod:`dlscope.analysis.measures.optimizer`): the optimizer step's host time per step,
its kernels by implementation (fused, foreach, per parameter), their GPU time, and the number of
distinct kernels (one per arithmetic pass over the state).

Saving (upper bound), the sum of two parts:

* GPU: the update's kernel time minus that time divided by the number of passes (a fused update
  reads and writes each parameter, gradient and state once, so at least about one pass's time
  remains), capped by the time the host waited for the GPU;
* host: the time of the framework ops inside the step, less what one op per pass (foreach) or
  one per pass instead of one per parameter and pass (per-parameter) would take: the host's
  cost of an optimizer step grows with the ops it dispatches. Measured with the profiler on,
  which slows dispatch.
"""

from __future__ import annotations

from ..analysis.core.host_classes import HostClass
from ..analysis.measures.optimizer import optimizer_step, optimizer_step_recorded
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, kernel_label, ms, steps

# Below this many per-parameter kernels per step the loop is too short to matter (a model with a
# handful of parameters); dlscope's own line.
MIN_PER_PARAMETER_KERNELS = 20
# torch.optim optimizers with fused=True (CUDA): Adam and AdamW since 2.0, SGD since 2.3, Adagrad since 2.5.
FUSED = ("Adam", "AdamW", "SGD", "Adagrad")
# What is left of the optimizer's host time once it is fused, by optimizer: measured on an H100
# (torch 2.11) for a model none of the suite's programs uses (python3 bench/fused_optimizer_host.py
# --device cuda: nn.TransformerEncoder, 144 parameters; the fused step's host time over the
# per-parameter loop's, each the median of 5 runs; bench/RESULTS.md). The fused step costs about
# the same for all three (0.94-0.97 ms: the Python that gathers the parameters into lists, about
# 6.6 us per parameter); the loops differ (Adam's dispatches more ops per parameter than SGD's).
# Both grow with the parameters, so the share holds across model sizes. Brackets from the CPU
# (bench/optimizer_dispatch.py --time): over 1% of the operators, under 18% of the host time.
FUSED_HOST_SHARES = {"Adam": 0.092, "AdamW": 0.084, "SGD": 0.191}
# An optimizer not measured (Adagrad) or not named: the largest share, the smallest saving.
FUSED_HOST_SHARE_UNKNOWN = max(FUSED_HOST_SHARES.values())
URL = "https://pytorch.org/docs/stable/optim.html#algorithms"
URL_CUDA = "https://nvidia.github.io/apex/optimizers.html"


class UnfusedOptimizer(Rule):
    id = RuleId.UNFUSED_OPTIMIZER
    title = "The optimizer step runs as many small kernels"
    description = "per-parameter (or per-operation foreach) optimizer kernels where a fused optimizer does one pass"
    needs = ("kernels", "phases", "api")
    needs_gpu = True
    cuda_only = True

    def precondition(self, ctx: Context) -> str | None:
        if not optimizer_step_recorded(ctx.data):
            return "no optimizer step was recorded (torch's Optimizer.step annotation or the derived 'optimizer' phase)"
        return None

    def check(self, ctx: Context) -> Finding | None:
        r = optimizer_step(ctx.data)
        if not r.kernels or r.fused_kernels >= r.foreach_kernels + r.per_parameter_kernels:
            return None  # nothing launched, or already fused
        impl = "per-parameter" if r.per_parameter_kernels >= r.foreach_kernels else "foreach"
        if impl == "per-parameter" and r.per_parameter_kernels < MIN_PER_PARAMETER_KERNELS:
            return None
        phase_ms, passes = r.phase_ms or 0.0, max(int(r.distinct_kernels), 1)
        floor = r.gpu_ms / passes
        gpu_saving, cap_note = ctx.gpu_saving_cap(r.gpu_ms - floor)
        host_keep = (1 / passes) if impl == "foreach" else min(1.0, passes / r.kernels)
        host_saving = (r.ops_ms or 0.0) * (1 - host_keep)
        saving = gpu_saving + host_saving
        p = ctx.pct(r.gpu_ms - floor + host_saving)  # judged on the cut itself; the step bound may be smaller
        if p is None or p < MIN_SAVING_PCT:
            return None
        opt = ctx.facts.optimizer or ""
        name = opt or "the optimizer"
        text = (
            f"{name}.step takes {ms(phase_ms)} per step on the host and launches {count(r.kernels)} kernels "
            f"({impl}: {count(r.per_parameter_kernels if impl == 'per-parameter' else r.foreach_kernels)}; "
            f"{ms(r.gpu_ms)} of GPU time in {r.distinct_kernels} distinct kernels)"
        )
        how = (
            f"a fused update makes one pass instead of {r.distinct_kernels}: its kernels could take "
            f"{ms(r.gpu_ms - floor)} less"
            + (f" ({cap_note})" if cap_note else "")
            + f", and dispatching fewer ops up to {ms(host_saving)} less host "
            f"time; up to {ms(saving)} per step from those two (measured with the profiler on)"
        )
        outside = phase_ms - (r.ops_ms or 0.0)
        if outside > 0 and outside >= host_saving:
            # said where it is as large as the host part counted: the replay can predict more than this
            # bound, since one fused launch no longer fills the GPU's launch queue and the host's waits
            # for room in it go too (the BERT-like program on an H200: bound 20.5 ms, replay 22.0 ms,
            # measured 27.6%)
            how += (
                f"; not counted there: the step's other {ms(outside)} in {name}.step outside its ops (Python, "
                "and waiting for room in the GPU's launch queue, which one fused launch no longer fills)"
            )
        row = {
            "optimizer": opt or None,
            "implementation": impl,
            "phase": r.phase,
            "phase_ms_per_step": phase_ms,
            "ops_ms_per_step": r.ops_ms,
            "kernels_per_step": r.kernels,
            "gpu_ms_per_step": r.gpu_ms,
            "distinct_kernels": r.distinct_kernels,
            "longest_kernel": kernel_label(r.longest_kernel) if r.longest_kernel else None,
            "steps": steps(r.steps),
        }
        return self.finding(
            ctx, saving, Evidence(text, how, [row]), _advice(ctx, opt, impl), url=URL if ctx.facts.torch else URL_CUDA
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        row = finding.evidence.rows[0]
        passes = max(int(row["distinct_kernels"] or 1), 1)
        share = FUSED_HOST_SHARES.get(row["optimizer"] or "", FUSED_HOST_SHARE_UNKNOWN)
        host = share if row["implementation"] == "per-parameter" else 1 / passes
        return Fix(
            self.id,
            f"one fused pass instead of {passes}, dispatching a few ops instead of one per parameter",
            host={HostClass.OPTIMIZER: host},
            gpu_in={HostClass.OPTIMIZER: 1 / passes},
            # a few launches instead of one per parameter and pass: they no longer fill the GPU's queue
            fuse_launches_in=(HostClass.OPTIMIZER,),
        )


def _advice(ctx: Context, opt: str, impl: str) -> str:
    if not ctx.facts.torch:
        return (
            "Update all parameters in one fused kernel per step (a multi-tensor apply over the parameter list, "
            "e.g. apex.optimizers.FusedAdam) instead of one kernel per parameter and operation."
        )
    if opt in FUSED:
        return (
            f"Construct the optimizer with fused=True: torch.optim.{opt}(model.parameters(), ..., fused=True) "
            "runs the whole update in one kernel per parameter group"
            + (
                " (today it runs one kernel per parameter and operation)."
                if impl == "per-parameter"
                else " instead of one foreach kernel per arithmetic operation."
            )
        )
    if impl == "per-parameter":
        return (
            f"{opt or 'The optimizer'} updates one parameter at a time: pass foreach=True "
            f"(torch.optim.{opt or 'X'}(..., foreach=True)), or switch to an optimizer with fused=True "
            f"({', '.join(FUSED)})."
        )
    return (
        f"{opt or 'The optimizer'} has no fused implementation in torch.optim: the foreach version is the fastest "
        f"built-in; a fused optimizer ({', '.join(FUSED)} with fused=True) or a compiled step "
        "(torch.compile(optimizer.step)) fuses its passes."
    )


RULE = UnfusedOptimizer()
