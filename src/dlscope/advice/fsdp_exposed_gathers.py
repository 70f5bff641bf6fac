"""fsdp_exposed_gathers: FSDP all-gathers the compute waits for, which prefetching would hide.

From the ``fsdp_units`` report (:mod:`dlscope.analysis.fsdp_units`): per rank and sharded unit, the
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
forward's GPU span was 25.2 ms traced and 21.6 ms untraced (the phase marks), about the 3.1-3.5 ms
of "exposed" gathers. So where the profile has GPU phase marks, each pass's exposure is reduced by
how much longer the pass took on the GPU traced than untraced; without marks, the finding rests
on the traced steps alone and is at most LOW. Until the estimate is checked against a measured
prefetch change it is at most MEDIUM.

Saving (upper bound): those exposed gathers on the rank that has the least of them (a step
shortens only if every rank's does); prefetching that hid them entirely would save that much.
Not yet checked against a measured prefetch change on a GPU (issue 24): the evidence says so.
"""

from __future__ import annotations

from ..analysis import fsdp_units
from .context import Context
from .finding import Evidence, Finding, cap_severity
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct

URL = "https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html"
ROOT = "(root)"


class FsdpExposedGathers(Rule):
    id = "fsdp_exposed_gathers"
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
        inflation = tracer_inflation(ctx)
        if inflation is not None:
            per_rank = {r: (max(f - inflation.get((r, "forward"), 0.0), 0.0),
                            max(b - inflation.get((r, "backward"), 0.0), 0.0), t)
                        for r, (f, b, t) in per_rank.items()}
        rank, (fwd, bwd, tail) = min(per_rank.items(), key=lambda kv: kv[1][0] + kv[1][1])
        saving = fwd + bwd
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        worst = sorted((r for r in rows if r["rank"] == rank and r["unit"] != fsdp_units.TAIL),
                       key=lambda r: -(r["exposed_ms_per_step"] or 0))[:6]
        text = (f"on rank {rank} (the rank with the least), the compute waited {ms(fwd)} per step for forward "
                f"all-gathers after the first and {ms(bwd)} for backward re-gathers ({pct(p)} of the step); "
                f"the reduce-scatter tail after the last compute is {ms(tail)} more")
        how = ("if prefetching hid those gathers under the previous unit's compute: an upper bound, not yet checked "
               "against a measured prefetch change on a GPU; "
               + ("less what the tracer added to each pass's GPU span (traced against untraced, from the CUDA events "
                  "at the phases)" if inflation is not None else
                  "measured on the traced steps only (no GPU phase marks): at most LOW"))
        advice = ("Issue the next units' all-gathers earlier. FSDP2: model.blocks[i].set_modules_to_forward_prefetch("
                  "[blocks[i + 1], blocks[i + 2]]) and set_modules_to_backward_prefetch([blocks[i - 1], ...]); keep "
                  "the last unit(s) gathered between forward and backward (fully_shard(block, "
                  "reshard_after_forward=False)), which also saves their backward re-gather at the cost of their "
                  "memory. FSDP1: forward_prefetch=True, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, "
                  "limit_all_gathers=False if memory allows. Wrapping larger units makes fewer, larger gathers.")
        f = self.finding(ctx, saving, Evidence(text, how, worst), advice, url=URL)
        # an upper bound from the traced steps' kernels, never compared with a measured prefetch
        # change: at most MEDIUM; at most LOW where no GPU marks correct the tracer's share
        f.severity = cap_severity(f.severity, "medium" if inflation is not None else "low")
        return f


def tracer_inflation(ctx: Context) -> dict[tuple[int, str], float] | None:
    """Per (rank, pass): how much longer the pass took on the GPU in the traced steps than in the
    untraced ones (median GPU spans from ``phase_gpu``), ms; None without marks in both."""
    d = ctx.data
    if not d.has("phase_gpu"):
        return None
    got = d.con.execute("""
        SELECT g.rank, g.name,
               median(g.gpu_end_ns - g.gpu_start_ns) FILTER (WHERE s.traced) AS traced,
               median(g.gpu_end_ns - g.gpu_start_ns) FILTER (WHERE NOT s.traced AND NOT s.warmup) AS untraced
        FROM phase_gpu g JOIN steps s ON s.rank = g.rank AND s.step = g.step
        WHERE g.name IN ('forward', 'backward') GROUP BY ALL""").fetchall()
    out = {(int(r), n): (t - u) / 1e6 for r, n, t, u in got if t is not None and u is not None}
    return out or None


def prefetchable_by_rank(rows: list[dict]) -> dict[int, tuple[float, float, float]]:
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
