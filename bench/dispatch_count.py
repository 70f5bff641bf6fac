"""Counting the operators PyTorch's dispatcher runs, for the benchmarks that measure what a change
adds to or removes from the host's work (bench/autocast_host_cost.py, bench/optimizer_dispatch.py)."""

from __future__ import annotations

from collections import Counter

from torch.utils._python_dispatch import TorchDispatchMode


class Counting(TorchDispatchMode):
    """Inside ``with Counting() as c:``, ``c.ops`` counts each operator dispatched, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
