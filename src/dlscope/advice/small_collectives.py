"""small_collectives: many small collectives per step, each paying NCCL's fixed latency.

A collective costs a fixed launch and synchronization latency (tens of microseconds across GPUs)
plus its size over the bandwidth; below about 1 MiB the latency dominates and the bus bandwidth
collapses (nccl-tests' curves), so many small messages cost far more than one large one with the
same bytes. DDP buckets gradients (bucket_cap_mb, 25 MiB by default) and Horovod fuses tensors
(64 MiB) for this reason.

Saving: the rule's own bound is the small collectives' GPU time per step minus that of the longest
of them (fused into one, at least one such operation would remain). Each collective also costs
the host its Python and c10d dispatch, which on a launch-bound step is most of its cost; the
replay's what-if drops the small collectives' calls with the host's work before each. On a 2-GPU
H100 job with one all-reduce per gradient (75 small ones a step), bucketing measured 11-25%
while their GPU time was 2.5% of the step (``bench/RESULTS.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct

if TYPE_CHECKING:
    from ..analysis.measures.collectives import RankSmallCollectives

MIN_PER_STEP = 8  # dlscope's line: fewer small collectives per step is ordinary (loss, metrics, a barrier)
TOP_KINDS = 5
URL = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"


class SmallCollectives(Rule):
    id = RuleId.SMALL_COLLECTIVES
    no_try_fix = (
        "fewer, larger collectives (DDP's bucket_cap_mb, batching all_reduce calls) are set in the program: a source"
        " change"
    )
    title = "Many small collectives per step"
    description = "many collectives under 1 MiB in each step, each paying a fixed latency"
    needs = ("comms",)
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.collectives import collective_sizes_known

        if not collective_sizes_known(ctx.data):
            return "the trace gives no message sizes (Gloo's come with input shapes: dlscope profile --mode full)"
        return None

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.collectives import small_collective_kinds, small_collectives

        per = [(r, _cost(r)) for r in small_collectives(ctx.data)]
        if not per:
            return None
        worst, cost = min(per, key=lambda rc: rc[1].saving_ms)  # every rank must gain for the step to
        if cost.per_step < MIN_PER_STEP:
            return None
        p = ctx.pct(cost.saving_ms)
        if p is None or p < MIN_SAVING_PCT:
            return None
        kinds = [
            {"operation": k.operation, "count": k.count, "mean_bytes": k.mean_bytes, "mean_us": k.mean_us}
            for k in small_collective_kinds(ctx.data, worst.rank, TOP_KINDS)
        ]
        text = (
            f"{cost.per_step:.0f} collectives under 1 MiB per step on rank {worst.rank} "
            f"({worst.total_bytes / max(worst.count, 1) / 1024:.0f} KiB on average), {ms(cost.ms_per_step)} per "
            f"step ({pct(ctx.pct(cost.ms_per_step))} of the step)"
        )
        how = "fused into one operation, at least the longest of them would remain"
        advice = (
            "Send fewer, larger messages: raise DDP's bucket size (DistributedDataParallel(..., "
            "bucket_cap_mb=25 or more), or leave it at its default if it was lowered), coalesce your own "
            "collectives (torch.distributed's all_reduce_coalesced, or one flattened tensor instead of one call "
            "per parameter or metric), and with FSDP wrap larger modules so each all-gather carries more."
        )
        return self.finding(ctx, cost.saving_ms, Evidence(text, how, kinds), advice, url=URL)

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        # each small collective costs the host its Python and c10d dispatch too, which on a
        # launch-bound step is most of it: the replay drops those calls (host work and GPU time);
        # the one fused operation that replaces them is left out (about one call's worth)
        return Fix(
            self.id,
            "the small collectives fused into one: their calls, the host's work before each and their GPU time gone",
            drop_calls_of=("small_comm_ns",),
            drop_setup=True,
            gpu={"small_comm_ns": 0.0},
        )


class _Cost(NamedTuple):
    """A rank's small collectives per step with collectives."""

    per_step: float
    ms_per_step: float
    saving_ms: float  # fused into one, at least the longest of them would remain in each step


def _cost(r: RankSmallCollectives) -> _Cost:
    steps = max(r.comm_steps, 1)
    return _Cost(r.count / steps, r.total_ns / 1e6 / steps, max(r.total_ns - r.longest_ns * r.steps, 0) / 1e6 / steps)


RULE = SmallCollectives()
