"""DataLoader workers for loaders made with ``num_workers=0``: worker processes, pinned memory and
persistent workers, so the next batches load while the GPU runs this one."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, change_dataloaders

# Workers per loader. Not the cores: a worker waiting on a file, the network or a sleep is a
# blocked process and holds no core, so a loader that mostly waits needs more workers than the
# machine has cores (issue 41: on 2 cores, cpus - 1 = 1 worker hid +2.8% of a 76% loader; 4 hid
# 79%). PyTorch's DataLoader only warns above the CPU count (dataloader.py,
# check_worker_number_rationality: "might get DataLoader running slow"), it does not refuse.
# At most 8: each worker is a process of its own (its memory, its start).
MAX_WORKERS = 8
# Without a prediction to size them by: the CPU count, at least 4 (PyTorch Lightning warns that 2
# workers or fewer "may be a bottleneck" when the machine has more CPUs: _worker_check in its
# data connector; a worker that waits needs no core of its own, above).
DEFAULT_WORKERS = 4
# Capacity beyond the bare need: a worker takes longer per batch than the training thread did
# (the batch crosses a process boundary; on few cores the workers' CPU work shares them with the
# step), and workers that just keep pace leave no slack: a judgement, not a measurement; it gives
# the 4 workers that hid issue 41's 76% loader. A planted sleeping loader on 2 cores (the advice at
# 50-53%) saved 40.5% with the bare need's 1 worker, 58.9% with this 2 (2 rounds each).
HEADROOM = 1.25


def choose_workers(cpus: int, predicted_saving_pct: float | None) -> tuple[int, int | None, str]:
    """``(workers, needed, why)``: the DataLoader workers to try, the number the advice's
    prediction needs (None when there is no prediction), and one line saying how it was chosen.

    The input_bound advice predicts the step without its loading (``predicted_saving_pct`` of the
    step gone). A worker takes about the main thread's loading time per batch (that same share of
    the old step) and the loader must hand over one batch per remaining step, so it needs
    ``p / (100 - p)`` workers loading side by side, with :data:`HEADROOM`, rounded up: 4 for a 76%
    loader, 2 for a 50% one."""
    p = predicted_saving_pct
    if p is not None and p > 0:
        side_by_side = p / max(100.0 - p, 1.0)  # batches loading at once to keep up
        needed = max(1, math.ceil(HEADROOM * side_by_side - 1e-9))  # (the tolerance: 3.0000000001 is 3)
        n = min(MAX_WORKERS, needed)
        return (
            n,
            needed,
            (
                f"{n} workers: the advice's {p:.0f}% saving needs {side_by_side:.1f} batches loading "
                f"side by side, {HEADROOM:g}x that" + (f" (at most {MAX_WORKERS})" if n < needed else "")
            ),
        )
    n = min(MAX_WORKERS, max(DEFAULT_WORKERS, cpus))
    return n, None, f"{n} workers: no prediction to size them by, so max({DEFAULT_WORKERS}, the {cpus} CPUs)"


class DataLoaderWorkers(InjectedFix):
    name = FixName.WORKERS
    rules = (RuleId.INPUT_BOUND,)
    describe = "DataLoader(num_workers=N, pin_memory=True, persistent_workers=True) for loaders without workers"

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[str] = []

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        from torch.utils.data import IterableDataset

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers, needed, why = choose_workers(cpus, ctx.options.get(self.name, {}).get("predicted_saving_pct"))
        self.detail = {"num_workers": workers, "needed": needed, "cpus": cpus, "why": why}
        self.applied_as = f"{workers} worker{'s' if workers > 1 else ''}"
        if needed is not None and workers < needed:
            self.weaker = f"{self.applied_as} where the advised saving needs {needed}"
        cuda = torch.cuda.is_available()
        fix = self

        def more_workers(given: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any] | None:
            if given.get("num_workers", 0) != 0:
                return None
            if isinstance(given.get("dataset"), IterableDataset):
                fix.skipped.append("an IterableDataset (workers would each yield the whole stream)")
                return None
            given.update(
                num_workers=workers, persistent_workers=True, prefetch_factor=given.get("prefetch_factor") or 2
            )
            if cuda and not given.get("pin_memory"):
                given["pin_memory"] = True
            fix.changed += 1
            return given

        change_dataloaders(more_workers)

    def outcome(self) -> tuple[bool, str]:
        if self.changed:
            return True, ""
        if self.skipped:
            return False, f"the program's loaders cannot take workers: {self.skipped[0]}"
        return False, "the program made no DataLoader with num_workers=0"
