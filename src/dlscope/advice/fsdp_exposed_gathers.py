"""fsdp_exposed_gathers: FSDP all-gathers the compute waits for, which prefetching would hide.

From the ``fsdp_units`` report (:mod:`dlscope.analysis.reports.fsdp_units`): per rank and sharded unit, the
part of each all-gather during which no compute kernel ran. FSDP gathers a unit's parameters
before its forward, and again before its backward when it resharded after forward; with the next
unit's gather issued early enough (FSDP2 issues one ahead by default; explicit prefetching can
issue more), the gather runs under the previous unit's compute.

What counts (per rank, per traced step; GPU time, which the tracer does not slow):

* the exposed gathers of every unit **but the first of the forward** (the root's gather starts
  the step: nothing runs before it to hide it under, and it is where a rank waits for a late
  peer, which is the straggler rule's);
* the backward's gathers, including its first: it re-gathers a unit that forward just freed,
  which ``reshard_after_forward=False`` for the last unit(s) avoids.

The reduce-scatter tail (gradients still reducing after the last compute) is shown, not counted:
no prefetch setting moves it.

The exposure is measured on the traced steps, whose slowed host issues each next gather later
than it would untraced (FSDP prefetches from the host's hooks): on a balanced 2-GPU FSDP2 job the
forward's GPU span was 27.2 ms traced and 21.1 ms untraced (the phase marks). So where the profile
has GPU phase marks, each pass's exposure is capped by the time the compute stream can have
waited in that pass untraced: the pass's untraced GPU span less its compute kernels' time (GPU
time, which the tracer does not slow). Nothing hidden can exceed that; the gathers' share of it is
the traced one where that is smaller. Without marks the finding rests on the traced steps alone
and is at most LOW.

Checked on 2 H100s (FSDP2 GPT, 6 blocks, ``bench/gpu_dist_run3.sh``): 2.19 ms per step predicted,
and prefetching the next two blocks in both passes with the last block kept gathered saved
1.49-3.46 ms (3 alternations, untraced). One job is not a calibration: at most MEDIUM.

Saving (upper bound): those exposed gathers on the rank that has the least of them (a step
shortens only if every rank's does); prefetching that hid them entirely would save that much.
"""

from __future__ import annotations

from typing import Any

from ..analysis.reports import fsdp_units
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding, Severity, cap_severity
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct

URL = "https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html"
ROOT = "(root)"


class FsdpExposedGathers(Rule):
    id = RuleId.FSDP_EXPOSED_GATHERS
    no_try_fix = "FSDP's prefetch and wrapping are set where the model is wrapped: a source change"
    title = "FSDP all-gathers are not hidden under compute"
    description = "the compute waits for FSDP's parameter all-gathers that prefetching could overlap"
    needs = ("kernels", "api", "phases")
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        return fsdp_units.REPORT.precondition(ctx.data) if fsdp_units.REPORT.precondition else None

    def check(self, ctx: Context) -> Finding | None:
        rows = fsdp_units.compute(ctx.data).table.to_pylist()
        per_rank = prefetchable_by_rank(rows)
        if not per_rank:
            return None
        idle = untraced_idle(ctx)
        if idle is not None:
            per_rank = {
                r: (min(f, idle.get((r, "forward"), f)), min(b, idle.get((r, "backward"), b)), t)
                for r, (f, b, t) in per_rank.items()
            }
        rank, (fwd, bwd, tail) = min(per_rank.items(), key=lambda kv: kv[1][0] + kv[1][1])
        saving = fwd + bwd
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        worst = sorted(
            (r for r in rows if r["rank"] == rank and r["unit"] != fsdp_units.TAIL),
            key=lambda r: -(r["exposed_ms_per_step"] or 0),
        )[:6]
        text = (
            f"on rank {rank} (the rank with the least), the compute waited {ms(fwd)} per step for forward "
            f"all-gathers after the first and {ms(bwd)} for backward re-gathers ({pct(p)} of the step); "
            f"the reduce-scatter tail after the last compute is {ms(tail)} more"
        )
        how = "if prefetching hid those gathers under the previous unit's compute: an upper bound; " + (
            "each pass's at most the time its compute stream was idle in the steps measured without tracing (the "
            "pass's GPU span from the CUDA events at the phases, less its compute kernels)"
            if idle is not None
            else "measured on the traced steps only (no GPU phase marks): at most LOW"
        )
        advice = (
            "Issue the next units' all-gathers earlier. FSDP2: model.blocks[i].set_modules_to_forward_prefetch("
            "[blocks[i + 1], blocks[i + 2]]) and set_modules_to_backward_prefetch([blocks[i - 1], ...]); keep "
            "the last unit(s) gathered between forward and backward (fully_shard(block, "
            "reshard_after_forward=False)), which also saves their backward re-gather at the cost of their "
            "memory. FSDP1: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, "
            "limit_all_gathers=False if memory allows. Wrapping larger units makes fewer, larger gathers."
        )
        f = self.finding(ctx, saving, Evidence(text, how, worst), advice, url=URL)
        # an upper bound checked against one measured prefetch change (a single job): at most MEDIUM;
        # at most LOW where no GPU marks bound the traced exposure
        f.severity = cap_severity(f.severity, Severity.MEDIUM if idle is not None else Severity.LOW)
        return f


def untraced_idle(ctx: Context) -> dict[tuple[int, str], float] | None:
    """Per (rank, pass): how long the compute stream can have waited in the pass per step without
    the tracer, ms (:func:`dlscope.analysis.measures.fsdp.untraced_pass_idle`); None without
    marks in both kinds of step."""
    from ..analysis.measures.fsdp import untraced_pass_idle

    return {(p.rank, p.pass_name): p.idle_ms for p in untraced_pass_idle(ctx.data)} or None


def prefetchable_by_rank(rows: list[dict[str, Any]]) -> dict[int, tuple[float, float, float]]:
    """Per rank, from the fsdp_units rows (in the report's order: by first gather in the step):
    (exposed forward gathers after the first, exposed backward gathers, reduce-scatter tail),
    ms per step."""
    out: dict[int, tuple[float, float, float]] = {}
    # the step's first gather: the root's (FSDP annotates it without a unit name) where there is
    # one, else the rank's first forward row
    first_forward: dict[int, str] = {r["rank"]: ROOT for r in rows if r["unit"] == ROOT and r["pass"] == "forward"}
    for r in rows:
        rank = r["rank"]
        fwd, bwd, tail = out.get(rank, (0.0, 0.0, 0.0))
        x = float(r["exposed_ms_per_step"] or 0.0)
        if r["unit"] == fsdp_units.TAIL:
            tail += x
        elif r["pass"] == "forward":
            if rank not in first_forward:
                first_forward[rank] = r["unit"]
            if r["unit"] != first_forward[rank]:  # the first has nothing before it to hide under
                fwd += x
        else:
            bwd += x
        out[rank] = (fwd, bwd, tail)
    return out


RULE = FsdpExposedGathers()
