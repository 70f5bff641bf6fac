"""straggler: one rank keeps the others waiting at every collective.

Judged from the steps measured without the tracer (``analysis.rank_waits``): per step, how much
longer the other ranks' GPUs stalled (or, without GPU phase marks, their hosts waited) than this
rank's; a straggler only when that lag is positive in significantly more steps than chance gives
(sign test), stands out of its own jitter, and what the others wait is at least
:data:`MIN_LAG_PCT` of the step. The saving is what the others really wait
(``StragglerVerdict.saving_ms``).

Profiles without untraced waits (recorded before dlscope's hooks, imported traces, or every step
traced) fall back to the traced steps' collective waits (``analysis.straggler``). The tracer's
overhead differs per rank, so a traced-only finding says so and is at most LOW.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..analysis.core.host_classes import HostClass
from ..analysis.core.host_state import DATA_LOADING_RE
from ..analysis.reports.straggler import OUTSIDE
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding, Severity, cap_severity
from .rule import Rule
from .text import ms, pct

if TYPE_CHECKING:
    from ..analysis.reports.rank_waits import StragglerVerdict

# dlscope's own lines: a rank that is slowest in at least 60% of the compared steps is a pattern
# (with 2 ranks, chance gives 50%), and a lag under 5% of the step is within the jitter of ranks
# kept in lock step by their collectives.
MIN_SHARE = 0.6
MIN_LAG_PCT = 5.0
MIN_STEPS = 3
URL = "https://pytorch.org/docs/stable/notes/ddp.html"
COMPUTE_RE = r"forward|backward|optimizer|model|train|compute|loss"
# the phase named for a class in the advice
CLASS_PHASE = {
    HostClass.INPUT: "dataloader",
    HostClass.MODEL: "forward/backward",
    HostClass.OPTIMIZER: "optimizer",
    HostClass.OTHER: OUTSIDE,
}


class Straggler(Rule):
    id = RuleId.STRAGGLER
    no_try_fix = "one rank or host slower than the others: the machine or the data's split, not a change to the program"
    title = "One rank keeps the others waiting"
    description = "a consistent straggler: the same rank arrives last at the collectives of most steps"
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.stragglers import ranks_with_steps

        return None if ranks_with_steps(ctx.data) >= 2 else "fewer than two ranks with steps"

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.reports.rank_waits import untraced_straggler

        verdict = untraced_straggler(ctx.data)
        if verdict is not None:
            return self._from_untraced(ctx, verdict)
        return self._from_traced(ctx)

    def _from_untraced(self, ctx: Context, v: StragglerVerdict) -> Finding | None:
        if not v.significant or not v.step_ms or 100 * v.saving_ms / v.step_ms < MIN_LAG_PCT:
            return None
        culprit = v.culprit
        phase = CLASS_PHASE.get(culprit) if culprit is not None else None
        who = "rank(s) waited" if v.basis == "host waits" else "rank(s)' GPUs waited (CUDA events at the phases)"
        waited = (
            f"{ms(v.saving_ms)} in the median step, {ms(v.lag_ms)} longer than rank {v.rank}"
            if v.basis == "GPU waits"
            else f"{ms(v.lag_ms)} longer than rank {v.rank} in the median step"
        )
        text = (
            f"over {v.steps} steps measured without tracing, the other {v.ranks - 1} {who} {waited} "
            f"({pct(100 * v.saving_ms / v.step_ms)} of the {ms(v.step_ms)} step; rank {v.rank} waited less in "
            f"{v.lagging_steps} of {v.steps} steps, sign test p = {v.p_value:.2g}; the waits' own jitter is "
            f"{ms(v.jitter_ms)})"
            + (
                f"; rank {v.rank} spends {ms(v.excess_ms[culprit])} more per step than the others in "
                f"{phase or culprit.label}"
                if culprit is not None
                else ""
            )
        )
        how = f"if rank {v.rank} kept pace, the others would stop waiting for it: " + (
            "their GPUs' median wait per step" if v.basis == "GPU waits" else "its median lag per step"
        )
        rows = [{"rank": v.rank, "class": c.label, "excess_ms": round(x, 3)} for c, x in v.excess_ms.items()]
        advice = _advice(v.rank, phase)
        if v.slower_everywhere:
            advice = (
                f"Rank {v.rank}'s host is slower in every phase of the step (input, forward/backward, optimizer), "
                "not in one: that is the machine more often than the work (another process on its CPUs, its NUMA "
                "placement or clock frequency). Re-run to see whether the same rank lags, and pin each rank to "
                "the CPUs near its GPU (nvidia-smi topo -m; numactl or taskset). " + advice
            )
        f = self.finding(ctx, v.saving_ms, Evidence(text, how, rows), advice, url=URL)
        f.untraced = True
        if v.slower_everywhere:
            # a host slower at everything is where the process ran more often than what it runs: the
            # balanced accelerate job's rank 0 was so once (rank 1's GPU stalled 2.7 ms a step) and
            # not in the four runs of the next lease; the wait is real, its cause may not recur
            f.severity = cap_severity(f.severity, Severity.MEDIUM)
        return f

    def _from_traced(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.stragglers import traced_step_selected, traced_stragglers

        rows = traced_stragglers(ctx.data)
        if len(rows) < MIN_STEPS:
            return None
        counts: dict[int, int] = {}
        for r in rows:
            counts[r.rank] = counts.get(r.rank, 0) + 1
        rank, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
        if n < MIN_SHARE * len(rows):
            return None
        mine = [r for r in rows if r.rank == rank]
        lag = sum(r.lag_ms for r in mine) / len(rows)  # mean over all compared steps
        step_ms = sum(r.step_ms for r in rows) / len(rows)
        if not step_ms or 100 * lag / step_ms < MIN_LAG_PCT:
            return None
        phases: dict[str, float] = {}
        for r in mine:
            if r.phase:
                phases[r.phase] = phases.get(r.phase, 0.0) + (r.phase_excess_ms or 0.0)
        phase = max(phases, key=lambda name: phases[name]) if phases else None
        basis = "waited for it at their collectives" if mine[0].basis == "waits" else "ran shorter steps"
        traced = ctx.basis.traced_excluded or traced_step_selected(ctx.data)
        text = (
            f"rank {rank} was the slowest rank in {n} of {len(rows)} compared steps; the other ranks {basis} "
            f"{ms(lag)} per step on average ({pct(100 * lag / step_ms)} of the {ms(step_ms)} step)"
            + (
                f"; it lost the time in '{phase}' ({ms(phases[phase] / len(mine))} more than the other ranks per step)"
                if phase
                else ""
            )
        )
        how = f"if rank {rank} kept pace, the others would stop waiting for it: at most its lag per step"
        if traced:
            how += (
                ". Measured in traced steps only, whose tracer overhead differs per rank: not confirmed "
                "without tracing, so at most LOW"
            )
        ev_rows = [
            {"step": r.step, "rank": r.rank, "lag_ms": r.lag_ms, "phase": r.phase, "phase_excess_ms": r.phase_excess_ms}
            for r in mine[:8]
        ]
        f = self.finding(ctx, lag, Evidence(text, how, ev_rows), _advice(rank, phase), url=URL)
        if traced:
            f.severity = cap_severity(f.severity, Severity.LOW)
        return f


def _advice(rank: int, phase: str | None) -> str:
    if phase and re.search(DATA_LOADING_RE, phase.lower()):
        return (
            f"Rank {rank} waits for its input in '{phase}' while the others wait for rank {rank}: give its "
            "DataLoader more workers (num_workers, prefetch_factor, pin_memory=True), check that its data "
            "shard is not larger or on slower storage than the others', and that nothing else runs on its CPUs."
        )
    if phase and phase != OUTSIDE and re.search(COMPUTE_RE, phase.lower()):
        return (
            f"Rank {rank} has more work in '{phase}' than the others (load imbalance): give every rank the same "
            "amount (DistributedSampler with drop_last=True, equal batch sizes and sequence lengths per rank, "
            "length-bucketed batches), and check its GPU's clocks and throttling (dlscope stats --report "
            "gpu_metrics) in case the hardware, not the work, is slower."
        )
    where = f"in '{phase}'" if phase and phase != OUTSIDE else "outside every phase"
    return (
        f"Rank {rank} spends the extra time {where}: look for work only it does (logging, checkpointing or "
        "evaluation on rank 0, a slower input shard, another process on its CPUs or GPU), and wrap the loop's "
        "parts in dlscope phases (with dlscope.phase('name'):) to pin it down."
    )


RULE = Straggler()
