"""DataLoader workers for loaders made with ``num_workers=0``: worker processes, pinned memory and
persistent workers, so the next batches load while the GPU runs this one."""

from __future__ import annotations

import functools
import inspect
import os
from types import ModuleType
from typing import Any

from .base import FixContext, InjectedFix

# Workers per loader: the CPUs this process may use, at most 8 (PyTorch's DataLoader warns above
# the CPU count; 4-8 workers are the usual advice, e.g. PyTorch's performance tuning guide).
MAX_WORKERS = 8


class DataLoaderWorkers(InjectedFix):
    name = "workers"
    rules = ("input_bound",)
    describe = "DataLoader(num_workers=N, pin_memory=True, persistent_workers=True) for loaders without workers"

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[str] = []

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        from torch.utils.data import DataLoader, IterableDataset

        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = max(1, min(MAX_WORKERS, cpus - 1))
        cuda = torch.cuda.is_available()
        orig = DataLoader.__init__
        fix = self

        sig = inspect.signature(orig)

        @functools.wraps(orig)
        def init(loader: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
            try:
                bound = sig.bind(loader, dataset, *args, **kwargs)
            except TypeError:
                return orig(loader, dataset, *args, **kwargs)  # let DataLoader report the bad call itself
            given = dict(bound.arguments)
            if given.get("num_workers", 0) != 0:
                return orig(loader, dataset, *args, **kwargs)
            if isinstance(dataset, IterableDataset):
                fix.skipped.append("an IterableDataset (workers would each yield the whole stream)")
                return orig(loader, dataset, *args, **kwargs)
            given.update(num_workers=workers, persistent_workers=True, prefetch_factor=given.get("prefetch_factor") or 2)
            if cuda and not given.get("pin_memory"):
                given["pin_memory"] = True
            fix.changed += 1
            given.pop("self", None)
            extra = given.pop("kwargs", {}) if "kwargs" in sig.parameters else {}
            return orig(loader, **given, **extra)

        DataLoader.__init__ = init

    def outcome(self) -> tuple[bool, str]:
        if self.changed:
            return True, ""
        if self.skipped:
            return False, f"the program's loaders cannot take workers: {self.skipped[0]}"
        return False, "the program made no DataLoader with num_workers=0"
