"""memory_underused: most of the GPU's memory is unused while the GPU is underutilized: a larger
batch would fit and would make each step's fixed costs cheaper per sample (DLProf's "GPU memory
is underutilized, try increasing batch size"; torch-tb-profiler and SageMaker Debugger's
BatchSize rule).

Measured: the memory peak against the device (:mod:`.memory`), the GPU's busy share, and the
per-step GPU idle that does not grow with the batch: waiting while the host launches (op dispatch
and launch calls cost the same for any batch; input loading and the kernels grow with it, and
host work after a sync may too, so neither counts).

Saving (upper bound), per step of the current batch's worth of samples: those fixed costs times
(1 - 1/k), k the batch factor that fits (the free memory over the peak, at most
:data:`MAX_FACTOR`): k times the samples pay the fixed costs once. Kernels also get more
efficient with more work, which this bound leaves out; the what-if's replay has it: each kernel
grows by its waves on the SMs (:mod:`dlscope.analysis.models.occupancy`), so a kernel that fills part of
one wave costs no more at k times the batch.
"""

from __future__ import annotations

from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct, size

# SageMaker Debugger's BatchSize rule: GPU memory and GPU utilization both under 70%
# (gpu_memory_threshold_p95 = gpu_threshold_p95 = 70); DLProf suggested at most 4x at a time.
LOW_BUSY_PCT = 70.0
HEADROOM = 0.9  # leave 10% of the device free, as torch-tb-profiler's 90% "near the limit" line
MAX_FACTOR = 4
URL = "https://pytorch.org/docs/stable/notes/cuda.html#memory-management"


class MemoryUnderused(Rule):
    id = RuleId.MEMORY_UNDERUSED
    title = "GPU memory is mostly unused: a larger batch would fit"
    description = (
        "the memory peak is far below capacity while the GPU is underutilized: a larger batch amortizes per-step costs"
    )
    needs = ("counters",)
    needs_gpu = True

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.memory_peak import memory_peak

        m = memory_peak(ctx.data)
        return m if isinstance(m, str) else None

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.memory_peak import memory_peak

        m = memory_peak(ctx.data)
        if isinstance(m, str):
            return None
        k = min(MAX_FACTOR, int(HEADROOM * m.total_bytes // m.peak_bytes))
        busy = 100.0 * ctx.idle_share("busy_ns")
        if k < 2 or busy >= LOW_BUSY_PCT:
            return None
        fixed = ctx.idle_share("launch_ns") * ctx.basis.unit_ms
        saving = fixed * (1 - 1 / k)
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        bs = ctx.data.meta.batch_size
        text = (
            f"the peak {m.source} is {size(m.peak_bytes)} of {size(m.total_bytes)} ({pct(m.pct)}) while the GPU is "
            f"busy {pct(busy)} of each step; {ms(fixed)} per step of GPU idle waiting for launches does not grow "
            "with the batch"
        )
        how = (
            f"a {k}x batch fits in {pct(100 * HEADROOM)} of the memory and pays those fixed costs once for {k}x the "
            f"samples: up to {ms(saving)} per current step's worth of samples"
        )
        row = {
            "metric": m.metric,
            "peak_gb": m.peak_bytes / 1e9,
            "total_gb": m.total_bytes / 1e9,
            "peak_pct": m.pct,
            "gpu_busy_pct": busy,
            "fixed_idle_ms_per_step": fixed,
            "batch_factor": k,
            "batch_size": bs,
            "peak_step": m.peak_step,
        }
        target = f"from {bs} to {bs * k}" if bs else f"{k}x"
        advice = (
            f"Raise the batch size {target} (memory allows it) and scale the learning rate with it (linearly, "
            "with a warm-up); if the model must keep its batch size, the same memory allows a larger model or "
            "longer sequences instead."
        )
        return self.finding(ctx, saving, Evidence(text, how, [row]), advice, url=URL)

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        k = float(finding.evidence.rows[0]["batch_factor"])
        return Fix(
            self.id,
            f"a {k:g}x batch: data loading {k:g}x per step, each kernel by its waves on the SMs "
            f"(at most {k:g}x), the host's launches unchanged",
            batch=k,
        )


RULE = MemoryUnderused()
