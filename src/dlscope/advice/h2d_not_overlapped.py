"""h2d_not_overlapped: host-to-device copies run while no kernel runs: copy and compute are
serialized (the pattern of the TensorRT study in the project's seeds: the GPU idle on PCIe
transfers, then computing, then idle again).

Measured: per step, the time of host-to-device copies not overlapped by any compute kernel on
the same GPU (as ``memcpy_sum``'s overlap), the copy's stream and where it was issued.

Saving (upper bound): that non-overlapped copy time, capped by the time the host waited for the
GPU. Copying the next batch on a side stream while this one computes hides at most the copy
itself. Pageable copies cannot overlap anything (they are synchronous): ``pageable_memcpy`` is
the first change there, and the two savings are not additive.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..analysis.core.host_classes import Blocking
from ..analysis.measures.h2d_copies import h2d_copy_sites
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct, size, steps

TOP = 5
URL_TORCH = "https://pytorch.org/docs/stable/notes/cuda.html#cuda-streams"
URL_CUDA = "https://developer.nvidia.com/blog/how-overlap-data-transfers-cuda-cc/"


class H2dNotOverlapped(Rule):
    id = RuleId.H2D_NOT_OVERLAPPED
    title = "Host-to-device copies do not overlap compute"
    description = "input copies run while the GPU computes nothing, so copy and compute are serialized"
    needs = ("memcpy", "kernels")
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        rows = [asdict(s) for s in h2d_copy_sites(ctx.data)]
        exposed = sum(r["not_overlapped_ms"] for r in rows)
        total = sum(r["copy_ms"] for r in rows)
        judged = ctx.judge_gpu_cut(exposed, MIN_SAVING_PCT) if rows else None
        if judged is None:
            return None
        saving, cap_note = judged
        for r in rows:
            r["steps"] = steps(r["steps"])
        top = rows[0]
        text = (
            f"{ms(exposed)} of the {ms(total)} of host-to-device copies per step ran while no kernel ran"
            f" ({pct(100 * exposed / total if total else 0)} not overlapped); the largest:"
            f" {size(top['bytes_per_copy'])} "
            + (f"from '{top['op']}' " if top["op"] else "")
            + (f"in phase '{top['phase']}' " if top["phase"] else "")
            + ("on the compute stream" if top["on_compute_stream"] else "on a separate stream")
        )
        how = (
            "copying on a side stream while the previous batch computes hides at most the copy itself: up to "
            f"{ms(saving)} per step" + (f" ({cap_note})" if cap_note else "") + "; not additive with pageable_memcpy"
        )
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows[:TOP]),
            _advice(ctx, top),
            url=URL_TORCH if ctx.facts.torch else URL_CUDA,
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(
            self.id,
            "host-to-device copies pinned and on a side stream",
            unblock=(Blocking.PAGEABLE_H2D,),
            gpu={"h2d_ns": 0.0},
        )


def _advice(ctx: Context, top: dict[str, Any]) -> str:
    if not ctx.facts.torch:
        return (
            "Issue the next batch's cudaMemcpyAsync from pinned memory on a second stream while the current batch's "
            "kernels run, and make the compute stream wait on an event recorded after the copy."
        )
    pin = (
        "First pin the source (pageable copies cannot overlap anything; see pageable_memcpy). "
        if top["src_kind"] == "pageable"
        else ""
    )
    return (
        f"{pin}Copy the next batch on a side stream while this one computes: "
        "s = torch.cuda.Stream(); with torch.cuda.stream(s): nxt = batch.to('cuda', non_blocking=True); "
        "then torch.cuda.current_stream().wait_stream(s) before using nxt (and nxt.record_stream(...)). "
        "A DataLoader with pin_memory=True feeding such a prefetcher gives the same overlap."
    )


RULE = H2dNotOverlapped()
