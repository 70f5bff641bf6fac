"""gpu_idle: the GPU sits idle for much of each step, and why (nsys's ``gpu_gaps`` and
``gpu_time_util``, torch-tb-profiler's low-utilization recommendation).

Measured per step (:mod:`dlscope.analysis.core.step_idle`): the time no kernel, copy or set ran, split
by what the host was doing: loading input, synchronizing, launching (busy with other work), the
GPU waiting on itself (the next work was already queued), or nothing recorded. Also the longest
single gaps, with the phase the host was in when they began.

Saving (upper bound): the idle share of the step. If the GPU never waited, a step could not be
shorter than its GPU busy time. The causes have their own rules (input_bound, sync_in_step,
launch_bound) with tighter bounds; this one is their sum and names the largest.
"""

from __future__ import annotations

from typing import Any

from ..analysis.measures.basis import WindowIdle
from ..analysis.measures.idle_gaps import longest_idle_gaps
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import ms, pct

# nsys's gpu_time_util flags regions below 50% GPU utilization; torch-tb-profiler recommends a
# larger batch for GPUs under 50% utilization (run.py, gpu_utilization < 0.5).
LOW_UTILIZATION_PCT = 50.0
URL = "https://docs.nvidia.com/nsight-systems/UserGuide/index.html"
CAUSES: tuple[tuple[str, str, RuleId | None], ...] = (
    ("input_ns", "waiting for input", RuleId.INPUT_BOUND),
    ("sync_ns", "after a host synchronization", RuleId.SYNC_IN_STEP),
    ("launch_ns", "while the host launched work", RuleId.LAUNCH_BOUND),
    ("queued_ns", "waiting on itself (work already queued)", None),
    ("other_ns", "with no recorded host activity", None),
)


class GpuIdle(Rule):
    id = RuleId.GPU_IDLE
    no_try_fix = "a symptom: the fixes of its causes (the findings above it) are what a run can test"
    symptom = True  # an effect: its causes have rules of their own
    title = "The GPU is idle for much of each step"
    description = "the GPU sits idle for over half of each step; the idle time is split by what the host was doing"
    needs = ("kernels",)
    needs_gpu = True

    def check(self, ctx: Context) -> Finding | None:
        b = ctx.basis
        traced_idle = 1.0 - ctx.idle_share("busy_ns")
        unit = b.unit_ms
        if b.traced_excluded and b.mean_step_ms:
            # Tracing slows the host, not the GPU: the GPU's busy time per step (from the traced
            # steps) is set against the step time measured without tracing, never the traced one
            busy = ctx.idle_ms("busy_ns")
            idle_share = max(0.0, 1.0 - busy / unit)
        else:
            idle_share = traced_idle
        util = 100.0 * (1.0 - idle_share)
        if util >= LOW_UTILIZATION_PCT:
            return None
        saving = idle_share * unit
        # the split by cause comes from the traced steps, scaled to this idle time
        scale = idle_share / traced_idle if traced_idle > 0 else 0.0
        shares = [(ctx.idle_share(col) * scale, label, rule) for col, label, rule in CAUSES]
        shares.sort(key=lambda s: -s[0])
        split = ", ".join(f"{pct(100 * s)} {label}" for s, label, _ in shares if s >= 0.005)
        of = "each step" if b.has_steps else "the profile"
        text = f"the GPU was busy {pct(util)} of {of} and idle {ms(saving)} of {ms(unit)}: {split}"
        how = (
            f"a step cannot be shorter than the GPU's busy time: if the GPU never waited, {of} could be up to "
            f"{ms(saving)} shorter; the causes' own findings bound their parts more tightly"
        )
        if b.traced_excluded and b.mean_step_ms:
            how += (
                f" (the GPU's busy time from the {b.windows} traced steps against the {ms(unit)} untraced step: "
                f"the traced steps themselves ran {ms(b.window_ms)}, slowed by the tracer; the split by cause "
                "is the traced steps', scaled)"
            )
        gaps = {
            k: {"longest_gap_ms": g.gap_ms, "host_phase_in_gap": g.host_phase}
            for k, g in longest_idle_gaps(ctx.data).items()
        }
        rows = [
            {**_step_row(r), **gaps.get((r.rank, r.step), {})}
            for r in sorted(ctx.idle, key=lambda r: -(r.window_ns - r.busy_ns))[:5]
        ]
        top_share, top_label, top_rule = shares[0]
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows),
            _advice(ctx, top_share, top_label, top_rule),
            title=f"The GPU is idle {pct(100 * idle_share)} of {of}",
            url=URL,
        )


def _step_row(r: WindowIdle) -> dict[str, Any]:
    return {
        "step": r.step,
        "step_ms": r.window_ns / 1e6,
        "busy_ms": r.busy_ns / 1e6,
        "idle_ms": (r.window_ns - r.busy_ns) / 1e6,
        "input_ms": r.input_ns / 1e6,
        "sync_ms": r.sync_ns / 1e6,
        "launch_ms": r.launch_ns / 1e6,
        "queued_ms": r.queued_ns / 1e6,
        "other_ms": r.other_ns / 1e6,
    }


def _advice(ctx: Context, share: float, label: str, rule: RuleId | None) -> str:
    of = "each step" if ctx.basis.has_steps else "the profile"
    if rule:
        first = (
            f"The largest part ({pct(100 * share)} of {of}) the GPU spent {label}; the {rule} finding says what to"
            " change."
        )
    elif label.startswith("waiting on itself"):
        first = (
            f"The largest part ({pct(100 * share)} of {of}) the next work was already queued: the GPU waited on "
            "dependencies between its own streams or on the gaps between short dependent kernels; fusing kernels "
            "(fusion_candidates) or overlapping independent work on separate streams helps."
        )
    else:
        first = (
            f"The largest part ({pct(100 * share)} of {of}) nothing was recorded on the host: it ran code outside "
            "framework ops and phases (Python, I/O, another thread). Wrap the parts of the loop in dlscope phases "
            "(with prof.phase('name'):) to see which one keeps the GPU waiting."
        )
    if rule in (RuleId.LAUNCH_BOUND, RuleId.SYNC_IN_STEP) and ctx.facts.torch:
        first += " A larger batch also raises the GPU's share of each step, at the same per-step host cost."
    return first


RULE = GpuIdle()
