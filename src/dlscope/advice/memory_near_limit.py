"""memory_near_limit: the program's memory peak is close to the GPU's capacity.

Near the limit PyTorch's caching allocator must release cached blocks and retry (cudaFree, then
cudaMalloc: both synchronize the device), fragmentation can end the run with an out-of-memory
error, and the batch cannot grow.

Saving (upper bound): the time per step the host spent in device allocation and release calls
(cudaMalloc/cudaFree and their driver equivalents) inside the steps: without memory pressure the
allocator serves everything from its cache. Zero when no such call was made: then the finding is
a risk, not yet a cost.
"""

from __future__ import annotations

from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import count, ms, pct, size

# torch-tb-profiler warns when the peak reaches 90% of the device's memory (run.py:
# peak_mem > total_mem * 0.9).
NEAR_LIMIT_PCT = 90.0
ALLOC_API_RE = r"^(cuda|cu)(malloc|free|memalloc|memfree)(async|_v2)?$"
URL = "https://pytorch.org/docs/stable/notes/cuda.html#memory-management"


class MemoryNearLimit(Rule):
    id = RuleId.MEMORY_NEAR_LIMIT
    no_try_fix = (
        "making room (activation checkpointing, a smaller batch with gradient accumulation) changes the program: a"
        " source change"
    )
    judges_untraced = True  # step times / NVML samples of every step
    title = "GPU memory is nearly full"
    description = (
        "the memory peak is close to the GPU's capacity: allocator retries, OOM risk, no room for a larger batch"
    )
    needs = ("counters",)

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.memory_peak import memory_peak

        m = memory_peak(ctx.data)
        return m if isinstance(m, str) else None

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.memory_peak import alloc_calls, memory_peak

        m = memory_peak(ctx.data)
        if isinstance(m, str) or m.pct < NEAR_LIMIT_PCT:
            return None
        calls = alloc_calls(ctx.data, ALLOC_API_RE)
        saving = calls.ms_per_step
        text = (
            f"the peak {m.source} reached {size(m.peak_bytes)} of {size(m.total_bytes)} ({pct(m.pct)})"
            + (f" in step {m.peak_step}" if m.peak_step is not None else "")
            + (
                f"; {count(calls.per_step)} device allocation/release calls per step took {ms(saving)}"
                if calls.per_step
                else "; no device allocation or release call inside the steps yet"
            )
        )
        how = (
            "the host spent this long per step in cudaMalloc/cudaFree, which a roomier cache would avoid"
            if saving
            else "no time is lost yet (the allocator never had to free and retry): this is a risk, not a measured cost"
        )
        row = {
            "metric": m.metric,
            "peak_gb": m.peak_bytes / 1e9,
            "total_gb": m.total_bytes / 1e9,
            "peak_pct": m.pct,
            "peak_step": m.peak_step,
            "alloc_calls_per_step": calls.per_step,
            "alloc_ms_per_step": saving,
        }
        if ctx.facts.torch:
            advice = (
                "Make room: run the forward pass under torch.autocast('cuda', dtype=torch.bfloat16) (halves "
                "activations), recompute activations in backward with torch.utils.checkpoint.checkpoint on the "
                "largest blocks, or halve the batch and accumulate gradients over two steps; "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True reduces fragmentation."
            )
        else:
            advice = (
                "Reduce the peak: keep fewer buffers alive at once, allocate once and reuse (a memory pool), or "
                "process smaller batches."
            )
        return self.finding(ctx, saving, Evidence(text, how, [row]), advice, url=URL)


RULE = MemoryNearLimit()
