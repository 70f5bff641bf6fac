"""comm_exposed: communication the step waits for, because no compute runs alongside it.

From the overlap report (``analysis.overlap``, HTA's comm/comp overlap): per rank, the merged
communication time not covered by compute. Part of it can be a straggler's fault (a rank waiting
for a late peer is "communicating" without moving data): that part is the straggler rule's, so
each rank's waits for the others (``analysis.comm_wait``) are taken out first, and the rank with
the least exposed transfer time decides (a step shortens only if every rank's exposure does).

Saving (upper bound): that exposed transfer time per step; perfect overlap would hide it all.
"""

from __future__ import annotations

from dataclasses import asdict

from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import ms, pct

# dlscope's own line: exposed communication under 5% of the step is not worth re-tuning buckets.
MIN_EXPOSED_PCT = 5.0
URL = "https://pytorch.org/docs/stable/notes/ddp.html#internal-design"


class CommExposed(Rule):
    id = RuleId.COMM_EXPOSED
    no_try_fix = (
        "overlapping communication with compute depends on the model's structure (DDP's bucket order, FSDP's prefetch):"
        " a source change"
    )
    title = "Communication is not overlapped with compute"
    description = "collectives that run while nothing computes, so every step waits for them"
    needs = ("comms",)

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.overlap import communication_basis

        return None if communication_basis(ctx.data) is not None else "no communication in the selected steps"

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.overlap import exposed_comm

        measured = exposed_comm(ctx.data)
        if measured is None or not measured.ranks:
            return None
        rows = [asdict(r) for r in measured.ranks]
        low = min(rows, key=lambda r: r["exposed_transfer_ms"])
        p = ctx.pct(low["exposed_transfer_ms"])
        if p is None or p < MIN_EXPOSED_PCT:
            return None
        text = (
            f"{ms(low['exposed_transfer_ms'])} of communication per step runs with no compute alongside on every "
            f"rank (rank {low['rank']}: {ms(low['comm_ms'])} of communication per step, {pct(low['overlap_pct'])} "
            "of it overlapped"
            + (f", {ms(low['wait_ms'])} of the rest waiting for other ranks" if low["wait_ms"] else "")
            + ")"
        )
        how = "perfect overlap would hide the exposed transfer time, waits for late ranks left out"
        return self.finding(
            ctx, low["exposed_transfer_ms"], Evidence(text, how, rows), _advice(measured.basis), url=URL
        )


def _advice(basis: str) -> str:
    gloo = basis == "host"
    first = "Gloo runs collectives on CPU threads: on GPUs use the NCCL backend. " if gloo else ""
    return (
        first + "Let DDP start each gradient all-reduce while backward still runs: keep gradients in buckets "
        "that fill early (DistributedDataParallel(..., bucket_cap_mb=N): smaller buckets start sooner, larger "
        "ones cost fewer launches; try 10-50), gradient_as_bucket_view=True, and no static_graph surprises "
        "(find_unused_parameters=False when every parameter gets a gradient). With gradient accumulation, skip "
        "the all-reduce of the inner steps (with model.no_sync():). With FSDP, prefetch "
        "(backward_prefetch=BACKWARD_PRE, forward_prefetch=True) so the all-gathers overlap compute."
    )


RULE = CommExposed()
