"""input_bound: the step waits for its data (loading or preprocessing on the training thread).

Measured: the time per step the host spent in data-loading phases (the derived ``dataloader``
phase, torch's ``enumerate(DataLoader)#...`` annotation, user phases named like ``preprocess``
or ``data_loading``: :data:`dlscope.analysis.core.host_state.DATA_LOADING_PATTERNS`), on the main
process, and how much of it the GPU sat idle (nothing queued) meanwhile.

Saving (upper bound): the GPU idle time under those phases. Loading that overlaps GPU work
(background workers, prefetching) costs nothing, so only the part the GPU waited through can go;
the rest of the phase ran while the GPU was busy anyway. With sampled detail the idle share is
measured in the traced steps and applied to the phase time of the timed steps.
"""

from __future__ import annotations

from typing import Any

from ..analysis.core.host_classes import HostClass
from ..analysis.measures.input_loading import (
    copies_in_loading,
    loading_per_timed_step_ms,
    loading_per_window_ns,
    loading_phases,
    loading_recorded,
)
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import Rule
from .text import ms, pct, steps

# XProf calls a program moderately input-bound from 5% of the step waiting for input
# (kModeratelyInfeedBoundThresholdInPercent); torch-tb-profiler recommends DataLoader workers from
# 5% of the step in the DataLoader (run.py, dataloader_ratio > 0.05).
MIN_SAVING_PCT = 5.0
TOP_STEPS = 5
URL_TORCH = "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading"
URL_CUDA = "https://developer.nvidia.com/blog/how-overlap-data-transfers-cuda-cc/"
TITLE_NO_GPU = "The step waits for input data"


class InputBound(Rule):
    id = RuleId.INPUT_BOUND
    title = "The GPU waits for input data"
    description = "the step waits on data loading or preprocessing while the GPU sits idle"
    needs = ("phases",)

    def precondition(self, ctx: Context) -> str | None:
        if not loading_recorded(ctx.data):
            return "no data-loading phase was recorded (name one 'data_loading' or 'preprocess', or use a DataLoader)"
        return None

    def check(self, ctx: Context) -> Finding | None:
        b = ctx.basis
        per_name = _per_name(ctx)
        if not per_name:
            return None
        input_ms = sum(r["ms_per_step"] for r in per_name)  # union per step is below; names may overlap
        stat_input_ms = loading_per_timed_step_ms(ctx.data)
        gpu_rows = _per_window(ctx)
        if b.windows:
            idle = sum(r["gpu_idle_ms"] for r in gpu_rows)
            loading = sum(r["input_ms"] for r in gpu_rows)
            frac = idle / loading if loading else 0.0
            # the untraced steps' loading time where phases were recorded there; phases derived from
            # the framework's trace (the DataLoader's __next__) exist only in the traced steps
            untraced = b.has_steps and b.stat_steps and stat_input_ms > 0
            base = stat_input_ms if untraced else loading / b.windows
            saving = frac * base
            how = (
                f"the GPU sat idle through {pct(100 * frac)} of the data loading in the steps with GPU data; "
                f"if loading overlapped GPU work, each step could be up to {ms(saving)} shorter"
            )
            if b.traced_excluded:
                how += (
                    " (idle share from the traced steps, applied to the untraced steps' loading time)"
                    if untraced
                    else " (loading time of the traced steps: their phases are recorded only while tracing)"
                )
        else:
            saving, frac = stat_input_ms, None
            how = (
                f"no GPU activity was recorded in these steps, so all {ms(saving)} of loading per step is counted: "
                "an upper bound if it overlapped the rest of the step"
            )
        p = ctx.pct(saving)
        if p is None or p < MIN_SAVING_PCT:
            return None
        names = ", ".join(f"'{r['phase']}' {ms(r['ms_per_step'])}" for r in per_name[:3])
        text = (
            f"{ms(stat_input_ms or (loading / b.windows if b.windows else input_ms))} of each {ms(b.unit_ms)} step is"
            f" spent loading data ({names})"
            + (f"; the GPU was idle for {pct(100 * frac)} of it" if frac is not None else "")
        )
        rows = (
            sorted(gpu_rows, key=lambda r: -r["gpu_idle_ms"])[:TOP_STEPS]
            if gpu_rows
            else [
                {
                    "phase": r["phase"],
                    "ms_per_step": r["ms_per_step"],
                    "pct_of_step": r["pct_of_step"],
                    "steps": r["steps"],
                }
                for r in per_name
            ]
        )
        gpu = ctx.data.has("kernels")  # a program that used no GPU is told about its step, not a GPU
        return self.finding(
            ctx,
            saving,
            Evidence(text, how, rows),
            self._advice(ctx, per_name, saving, gpu),
            title=None if gpu else TITLE_NO_GPU,
            url=URL_TORCH if ctx.facts.torch else URL_CUDA,
        )

    def _advice(self, ctx: Context, per_name: list[dict[str, Any]], saving: float, gpu: bool) -> str:
        f = ctx.facts
        top = per_name[0]["phase"]
        meanwhile = "while the GPU runs this one" if gpu else "while the training thread computes this one"
        if not f.torch and not gpu:
            return (
                f"Prepare the next batch while this one is computed: move the work in '{top}' to a background "
                "thread or process with a small queue between them."
            )
        if not f.torch:
            return (
                f"Prepare the next batch while the GPU computes: move the work in '{top}' to a background thread or "
                "process, and double-buffer the host-to-device copies (pinned buffers from cudaHostAlloc, "
                "cudaMemcpyAsync on a second stream) so that loading overlaps the kernels."
            )
        pin = (
            " pin_memory=True,"
            if gpu and (copies_in_loading(ctx.data).get("pageable") or f.dataloader != "multi")
            else ""
        )
        if top == "dataloader" or top.startswith("enumerate(DataLoader"):
            if f.dataloader == "multi":
                return (
                    f"The DataLoader already has worker processes, yet {'the GPU' if gpu else 'the step'} waits "
                    "for them: raise num_workers (and prefetch_factor), add persistent_workers=True, and make the "
                    "per-sample work cheaper (decode once and cache"
                    + (
                        "; move augmentation to the GPU with torchvision.transforms.v2 on CUDA tensors or NVIDIA DALI)."
                        if gpu
                        else ")."
                    )
                )
            waits = f"the GPU waits {ms(saving)} per step" if gpu else f"each step waits {ms(saving)}"
            return (
                f"The DataLoader loads every batch in the training process (num_workers=0), so {waits}. Create it with"
                f" DataLoader(dataset, batch_size=...,{pin} num_workers=N, persistent_workers=True, prefetch_factor=2),"
                f" N about the CPU cores {'per GPU' if gpu else 'to spare'}, so batches are prepared in parallel"
                f" {meanwhile}."
            )
        untraced = per_name[0].get("outside_ops_pct")
        where = (
            f", {pct(untraced)} of it Python or NumPy code outside any PyTorch op"
            if untraced is not None and untraced >= 50
            else ""
        )
        workers = (
            "the DataLoader's worker processes (already in use)"
            if f.dataloader == "multi"
            else "DataLoader worker processes"
        )
        return (
            f"Move the work of '{top}' ({ms(per_name[0]['ms_per_step'])} per step on the training thread{where}) "
            f"into the Dataset's __getitem__ or a collate_fn, so that {workers} prepare the next batch {meanwhile}: "
            f"DataLoader(dataset, batch_size=..., num_workers=N,{pin} persistent_workers=True)."
            + (" Per-batch math such as normalization can instead run on the GPU after the copy." if gpu else "")
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        return Fix(self.id, "data loading off the training thread, in DataLoader workers", host={HostClass.INPUT: 0.0})


def _per_name(ctx: Context) -> list[dict[str, Any]]:
    """Per data-loading phase name: mean ms per timed step (or per instance without steps), share
    of the step, the steps it ran in, and how much of it no framework op covered."""
    unit = ctx.basis.unit_ms
    out = []
    for r in loading_phases(ctx.data):
        c = r.op_covered
        outside = 100.0 * (1 - c[1] / c[0]) if c and c[0] else None
        out.append(
            {
                "phase": r.phase,
                "ms_per_step": r.ms_per_step,
                "pct_of_step": 100.0 * r.ms_per_step / unit if unit else None,
                "steps": steps(r.steps),
                "outside_ops_pct": outside,
            }
        )
    return out


def _per_window(ctx: Context) -> list[dict[str, Any]]:
    """Per GPU window: its step, length, data-loading time and the GPU idle while loading."""
    if not ctx.basis.windows:
        return []
    loading = loading_per_window_ns(ctx.data)
    out = []
    for r in ctx.idle:
        out.append(
            {
                "step": r.step,
                "step_ms": r.window_ns / 1e6,
                "input_ms": loading.get((r.rank, r.step), 0.0) / 1e6,
                "gpu_idle_ms": r.input_ns / 1e6,
                "gpu_busy_ms": r.busy_ns / 1e6,
            }
        )
    return out


RULE = InputBound()
