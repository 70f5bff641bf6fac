"""pageable_memcpy: copies between the GPU and pageable (not pinned) host memory.

nsys's ``cuda_memcpy_async`` flags every such copy; dlscope reports them from the default floor
(:data:`.rule.MIN_SAVING_PCT` of the step).

Such a copy cannot be asynchronous: the driver stages it through a pinned buffer of its own and
the calling thread waits until it is done, whatever the API says (nsys's ``cuda_memcpy_async``
rule). It also runs below the link's bandwidth.

Saving (upper bound), per step: the time the host was blocked in those copy calls, but no more than
the GPU idle time the host caused (input, sync, launch) plus the copies' own GPU time. From pinned
memory the call returns at once and the copy runs at full bandwidth on the GPU's copy engine:
the host gets its blocked time back, which shortens the step only where the GPU was waiting for
the host, and the copies themselves can get faster. (A pageable copy also waits for the stream's
earlier work, like a synchronize: a tiny copy can block for milliseconds.)
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
from .text import ms, pct, size, steps

TOP = 5
URL_TORCH = "https://pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers"
URL_CUDA = "https://developer.nvidia.com/blog/how-optimize-data-transfers-cuda-cc/"


class PageableMemcpy(Rule):
    id = RuleId.PAGEABLE_MEMCPY
    title = "Copies from pageable host memory block the host"
    description = "host-device copies use pageable memory, so they block the calling thread and run slower"
    needs = ("memcpy", "api")
    needs_gpu = True
    cuda_only = True

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.pageable_copies import pageable_copy_ns, pageable_copy_sites

        wait = ctx.idle_ms("pageable_wait_ns")
        if not wait:
            return None
        copy_ns = pageable_copy_ns(ctx.data)
        saving = ctx.per_window(
            sum(
                min(r.pageable_wait_ns, r.input_ns + r.sync_ns + r.launch_ns + copy_ns.get((r.rank, r.step), 0))
                for r in ctx.idle
            )
        )
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        rows = [asdict(s) for s in pageable_copy_sites(ctx.data)]
        if not rows:
            return None
        top = rows[0]
        n = sum(r["copies_per_step"] for r in rows)
        text = (
            f"{n:.0f} copies per step use pageable host memory and block the host {ms(wait)} per step"
            f" ({pct(ctx.pct(wait))} of the step); the largest: {top['direction']} of {size(top['bytes_per_copy'])}"
            f" from {_where(top)} at {top['gb_per_s'] or 0:.1f} GB/s"
        )
        how = (
            f"the host waited {ms(wait)} per step inside these copy calls; from pinned memory they return at once "
            "and overlap other work, which shortens the step where the GPU waited for the host: up to "
            f"{ms(saving)} per step"
        )
        for r in rows:
            r["steps"] = steps(r["steps"])
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows[:TOP]),
            _advice(ctx, top),
            url=URL_TORCH if ctx.facts.torch else URL_CUDA,
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(self.id, "pinned host memory and non_blocking copies", unblock=(Blocking.PAGEABLE_H2D,))


def _where(r: dict[str, Any]) -> str:
    parts = [f"'{r['op']}'" if r.get("op") else None, f"phase '{r['phase']}'" if r.get("phase") else None]
    return " in ".join(p for p in parts if p) or "an unknown call site"


def _advice(ctx: Context, top: dict[str, Any]) -> str:
    if not ctx.facts.torch:
        return (
            "Allocate the host buffers with cudaHostAlloc (or pin existing ones with cudaHostRegister) and copy "
            "with cudaMemcpyAsync on a non-default stream, so the copy neither blocks the host nor waits for "
            "staging."
        )
    where = _where(top)
    if top["direction"] == "DtoH":
        return (
            f"The device-to-host copy in {where} lands in pageable memory: copy into a pinned tensor instead "
            "(out = torch.empty(shape, dtype=..., pin_memory=True); out.copy_(t, non_blocking=True)) and read it "
            "only after a single torch.cuda.Event or stream synchronize, ideally once per several steps."
        )
    loader = (
        " Batches from a DataLoader get this with DataLoader(..., pin_memory=True)."
        if ctx.facts.dataloader
        else " With a DataLoader, DataLoader(..., pin_memory=True) does the pinning in its workers."
    )
    return (
        f"The host-to-device copy in {where} comes from pageable memory: pin the source tensor "
        "(t = t.pin_memory(), or build it in a pinned buffer reused every step) and copy it with "
        f"t.to('cuda', non_blocking=True).{loader}"
    )


RULE = PageableMemcpy()
