"""sync_in_step: the host waits for the GPU inside the step (``.item()``, ``.cpu()``,
``torch.cuda.synchronize()``, blocking copies; nsys's ``cuda_api_sync`` and ``cuda_memcpy_sync``).

While the host waits, it prepares nothing; after the wait the GPU's queue is empty until the
host launches again. Measured: the time the main process spent in synchronizing calls per step
(:data:`dlscope.analysis.core.host_state.SYNC_API_PATTERNS` and the ``sync`` table), where they were
called, and the GPU idle time the host caused in the same step.

Saving (upper bound), per step: the smaller of the host's wait and the GPU idle time the host
caused (waiting for input, for a sync, or for launches). Without the wait the host would move on
to the next work, which can only help while the GPU still has to wait for the host; and the step
cannot lose more than the host waited. Pageable copies, which block too, are left to
``pageable_memcpy``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..analysis.core.host_classes import Blocking
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import count, ms, pct, steps

TOP = 5
URL_TORCH = "https://pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution"
URL_CUDA = "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#asynchronous-and-overlapping-transfers-with-computation"
# the ops of a read of one number (.item()) and of copies to the host (.cpu(), .tolist(), .to("cpu"))
ITEM_OPS = ("aten::item", "aten::_local_scalar_dense")
HOST_COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu")
# ops whose output size depends on the data: they copy a count to the host and wait for it
DATA_DEPENDENT_OPS = (
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique2",
    "aten::repeat_interleave",
    "aten::index",
    "aten::argwhere",
)


class SyncInStep(Rule):
    id = RuleId.SYNC_IN_STEP
    title = "The host waits for the GPU inside the step"
    description = "synchronizing calls (.item(), .cpu(), synchronize, blocking copies) stall the host every step"
    needs = ("api",)
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        per_window = [min(r.sync_wait_ns, r.input_ns + r.sync_ns + r.launch_ns) for r in ctx.idle]
        saving = ctx.per_window(sum(per_window))
        wait = ctx.idle_ms("sync_wait_ns")
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        from ..analysis.measures.host_syncs import sync_sites

        rows = [{**asdict(s), "steps": steps(s.steps)} for s in sync_sites(ctx.data)]
        if not rows:
            return None
        top = rows[0]
        n = sum(r["calls_per_step"] for r in rows)
        text = (
            f"the host waited for the GPU {ms(wait)} per step in {count(n)} synchronizing call"
            f"{'s' if n != 1 else ''}; the largest: {top['call']}"
            + (f" from '{top['op']}'" if top["op"] else "")
            + (f" in phase '{top['phase']}'" if top["phase"] else "")
            + f" ({ms(top['wait_ms_per_step'])} per step)"
        )
        how = (
            f"per step, the smaller of the host's wait ({ms(wait)}) and the GPU idle time the host caused "
            f"({ms(ctx.idle_ms('input_ns') + ctx.idle_ms('sync_ns') + ctx.idle_ms('launch_ns'))}): without the "
            f"wait the host would go on preparing work, so the step could be up to {ms(saving)} ({pct(p)}) shorter"
        )
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows[:TOP]),
            _advice(ctx, top),
            url=URL_TORCH if ctx.facts.torch else URL_CUDA,
        )

    def untestable(self, finding: Finding) -> str | None:
        """The defer_sync fix postpones the reads of one-number results (.item(), .tolist()): a finding none of
        whose syncs is such a read (torch.cuda.synchronize, a data-dependent shape) needs a source change."""
        rows = finding.evidence.rows
        if not rows or any(_reads_a_number(r) for r in rows):
            return None
        top = rows[0]
        return (
            f"a source change: the syncs are not reads of a number that a fix can defer; the largest, {_site(top)},"
            " must leave the step or wait on an event where its result is needed"
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(
            self.id,
            "no synchronizing calls or copies to pageable memory (.item(), .cpu()) in the step",
            unblock=(Blocking.SYNC, Blocking.PAGEABLE_D2H),
        )


def _reads_a_number(row: dict[str, Any]) -> bool:
    """Whether a sync site is a read of a result to the host (.item(), or a copy to the host: .tolist()
    and .cpu() look alike there); the defer_sync fix tries those (it says when it found none to defer)."""
    op, inner = row.get("op") or "", row.get("inner_op") or ""
    return op in ITEM_OPS or inner in ITEM_OPS or op.startswith(HOST_COPY_OPS) or inner.startswith(HOST_COPY_OPS)


def _site(row: dict[str, Any]) -> str:
    """Where a sync was made, as the evidence has it: the call, its op and its phase (the profile keeps no
    source lines)."""
    return (
        str(row["call"])
        + (f" from '{row['op']}'" if row.get("op") else "")
        + (f" ('{row['inner_op']}')" if row.get("inner_op") and row.get("inner_op") != row.get("op") else "")
        + (f" in phase '{row['phase']}'" if row.get("phase") else "")
    )


def _advice(ctx: Context, top: dict[str, Any]) -> str:
    op, inner, phase = top.get("op") or "", top.get("inner_op") or "", top.get("phase")
    where = f" in '{phase}'" if phase else ""
    n = top["calls_per_step"]
    per = "once per step" if n == 1 else "twice per step" if n == 2 else f"{count(n)} times per step"
    if not ctx.facts.torch:
        return (
            f"{top['call']}{where} blocks the host {per}. Order GPU work with events instead "
            "(cudaEventRecord + cudaStreamWaitEvent) and read results back asynchronously "
            "(cudaMemcpyAsync into pinned memory, checked once per several iterations)."
        )
    if op in ITEM_OPS or inner in ITEM_OPS:
        return (
            f".item(){where} waits for the GPU {per}. Keep the value on the GPU (e.g. total += loss.detach()) "
            "and call .item() once every N steps or after the loop; for logging, copy with "
            "loss.detach().to('cpu', non_blocking=True) into a pinned tensor and read it a step later."
        )
    if op in DATA_DEPENDENT_OPS or inner in DATA_DEPENDENT_OPS:
        return (
            f"'{op or inner}'{where} has an output size that depends on the data, so it waits for the GPU {per}. "
            "Use a fixed-size form (torch.where with a mask, nonzero(..., size=N) or masked arithmetic) or move it "
            "out of the step."
        )
    if op.startswith(HOST_COPY_OPS) or inner.startswith("aten::copy_"):
        return (
            f"A copy to the host ({op or inner}){where} waits for the GPU {per}. Copy into a pinned tensor with "
            "non_blocking=True and read it only after a torch.cuda.Event you synchronize on later (or every N steps)."
        )
    if "devicesynchronize" in top["call"].lower():
        return (
            f"torch.cuda.synchronize(){where} stops the host {per} until the GPU is done. Remove it from the "
            "training loop (keep it only around timing code), or synchronize on a torch.cuda.Event recorded "
            "where the result is needed."
        )
    return (
        f"{top['call']}{where} blocks the host {per}"
        + (f" (called from '{op}')" if op else "")
        + ". Remove the synchronization from the step, or wait on a torch.cuda.Event recorded where the result "
        "is needed and as late as possible."
    )


RULE = SyncInStep()
