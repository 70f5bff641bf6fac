"""comm_exposed: communication the step waits for, because no compute runs alongside it.

From the overlap report (``analysis.overlap``, HTA's comm/comp overlap): per rank, the merged
communication time not covered by compute. Part of it can be a straggler's fault (a rank waiting
for a late peer is "communicating" without moving data): that part is the straggler rule's, so
each rank's waits for the others (``analysis.comm_wait``) are taken out first, and the rank with
the least exposed transfer time decides (a step shortens only if every rank's exposure does).

Saving (upper bound): that exposed transfer time per step; perfect overlap would hide it all.
"""

from __future__ import annotations

from ..analysis.comm_wait import step_wait_sql
from ..analysis.overlap import overlap_sql, work_sql
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import ms, pct

# dlscope's own line: exposed communication under 5% of the step is not worth re-tuning buckets.
MIN_EXPOSED_PCT = 5.0
URL = "https://pytorch.org/docs/stable/notes/ddp.html#internal-design"


class CommExposed(Rule):
    id = "comm_exposed"
    title = "Communication is not overlapped with compute"
    description = "collectives that run while nothing computes, so every step waits for them"
    needs = ("comms",)

    def precondition(self, ctx: Context) -> str | None:
        return None if work_sql(ctx.data) is not None else "no communication in the selected steps"

    def check(self, ctx: Context) -> Finding | None:
        d = ctx.data
        got = work_sql(d)
        if got is None:
            return None
        work, basis = got
        steps = ctx.basis.windows if basis == "gpu" else int(d.scalar("SELECT count(*) FROM detail_steps") or 0)
        steps = max(int(steps or 0), 1)
        rows = d.rows(f"""
            WITH o AS ({overlap_sql(work)}),
                 w AS (SELECT rank, sum(wait_ns)::BIGINT AS wait_ns FROM ({step_wait_sql(d)}) GROUP BY rank)
            SELECT o.rank, o.comm_ns / 1e6 / {steps} AS comm_ms, (o.comm_ns - o.overlap_ns) / 1e6 / {steps} AS exposed_ms,
                   coalesce(w.wait_ns, 0) / 1e6 / {steps} AS wait_ms,
                   greatest(o.comm_ns - o.overlap_ns - coalesce(w.wait_ns, 0), 0) / 1e6 / {steps} AS exposed_transfer_ms,
                   100.0 * o.overlap_ns / nullif(o.comm_ns, 0) AS overlap_pct
            FROM o LEFT JOIN w USING (rank) ORDER BY rank""")
        if not rows:
            return None
        low = min(rows, key=lambda r: r["exposed_transfer_ms"])
        p = ctx.pct(low["exposed_transfer_ms"])
        if p is None or p < MIN_EXPOSED_PCT:
            return None
        text = (f"{ms(low['exposed_transfer_ms'])} of communication per step runs with no compute alongside on every "
                f"rank (rank {low['rank']}: {ms(low['comm_ms'])} of communication per step, {pct(low['overlap_pct'])} "
                f"of it overlapped" + (f", {ms(low['wait_ms'])} of the rest waiting for other ranks" if low["wait_ms"] else "")
                + ")")
        how = "perfect overlap would hide the exposed transfer time, waits for late ranks left out"
        return self.finding(ctx, low["exposed_transfer_ms"], Evidence(text, how, rows), _advice(d, basis), url=URL)


def _advice(d, basis: str) -> str:  # noqa: ANN001 - ProfileData
    gloo = basis == "host"
    first = ("Gloo runs collectives on CPU threads: on GPUs use the NCCL backend. " if gloo else "")
    return (first + "Let DDP start each gradient all-reduce while backward still runs: keep gradients in buckets "
            "that fill early (DistributedDataParallel(..., bucket_cap_mb=N): smaller buckets start sooner, larger "
            "ones cost fewer launches; try 10-50), gradient_as_bucket_view=True, and no static_graph surprises "
            "(find_unused_parameters=False when every parameter gets a gradient). With gradient accumulation, skip "
            "the all-reduce of the inner steps (with model.no_sync():). With FSDP, prefetch "
            "(backward_prefetch=BACKWARD_PRE, forward_prefetch=True) so the all-gathers overlap compute.")


RULE = CommExposed()
