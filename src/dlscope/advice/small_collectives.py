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

from ..analysis.gpu_work import selected_sql
from ..analysis.replay import Fix
from ..vocabulary.collectives import SMALL_BYTES, size_bytes_sql
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct

MIN_PER_STEP = 8  # dlscope's line: fewer small collectives per step is ordinary (loss, metrics, a barrier)
URL = "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html"


class SmallCollectives(Rule):
    id = "small_collectives"
    title = "Many small collectives per step"
    description = "many collectives under 1 MiB in each step, each paying a fixed latency"
    needs = ("comms",)
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        if not ctx.data.scalar("SELECT count(*) FROM comms WHERE in_bytes IS NOT NULL OR out_bytes IS NOT NULL"):
            return "the trace gives no message sizes (Gloo's come with input shapes: dlscope profile --mode full)"
        return None

    def check(self, ctx: Context) -> Finding | None:
        d = ctx.data
        rows_sql = selected_sql(d, "comms", launched=True)
        size = size_bytes_sql("name", "in_bytes", "out_bytes", "group_size")
        per = d.rows(f"""
            WITH c AS (SELECT *, {size} AS size_bytes FROM ({rows_sql}) WHERE step IS NOT NULL),
                 small AS (SELECT * FROM c WHERE size_bytes < {SMALL_BYTES})
            SELECT rank, count(DISTINCT step) AS steps, count(*) AS n, sum(end_ns - start_ns)::BIGINT AS ns,
                   max(end_ns - start_ns) AS longest_ns, sum(size_bytes)::BIGINT AS bytes,
                   (SELECT count(DISTINCT step) FROM c c2 WHERE c2.rank = small.rank) AS comm_steps
            FROM small GROUP BY rank ORDER BY rank""")
        if not per:
            return None
        for r in per:
            steps = max(r["comm_steps"], 1)
            r["per_step"] = r["n"] / steps
            r["ms_per_step"] = r["ns"] / 1e6 / steps
            r["saving_ms"] = max(r["ns"] - r["longest_ns"] * r["steps"], 0) / 1e6 / steps
        worst = min(per, key=lambda r: r["saving_ms"])  # every rank must gain for the step to
        if worst["per_step"] < MIN_PER_STEP:
            return None
        p = ctx.pct(worst["saving_ms"])
        if p is None or p < MIN_SAVING_PCT:
            return None
        kinds = d.rows(f"""SELECT name AS operation, count(*) AS count, avg({size}) AS mean_bytes,
                                  avg(end_ns - start_ns) / 1e3 AS mean_us
                           FROM ({rows_sql}) WHERE {size} < {SMALL_BYTES} AND rank = {worst['rank']}
                           GROUP BY 1 ORDER BY count DESC LIMIT 5""")
        text = (f"{worst['per_step']:.0f} collectives under 1 MiB per step on rank {worst['rank']} "
                f"({worst['bytes'] / max(worst['n'], 1) / 1024:.0f} KiB on average), {ms(worst['ms_per_step'])} per "
                f"step ({pct(ctx.pct(worst['ms_per_step']))} of the step)")
        how = "fused into one operation, at least the longest of them would remain"
        advice = ("Send fewer, larger messages: raise DDP's bucket size (DistributedDataParallel(..., "
                  "bucket_cap_mb=25 or more), or leave it at its default if it was lowered), coalesce your own "
                  "collectives (torch.distributed's all_reduce_coalesced, or one flattened tensor instead of one call "
                  "per parameter or metric), and with FSDP wrap larger modules so each all-gather carries more.")
        return self.finding(ctx, worst["saving_ms"], Evidence(text, how, kinds), advice, url=URL)

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        # each small collective costs the host its Python and c10d dispatch too, which on a
        # launch-bound step is most of it: the replay drops those calls (host work and GPU time);
        # the one fused operation that replaces them is left out (about one call's worth)
        return Fix(self.id, "the small collectives fused into one: their calls, the host's work before each and "
                            "their GPU time gone", drop_calls_of=("small_comm_ns",), drop_setup=True,
                   gpu={"small_comm_ns": 0.0})


RULE = SmallCollectives()
