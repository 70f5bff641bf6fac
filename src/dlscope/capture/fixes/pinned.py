"""Pinned host memory for the input's copies: ``pin_memory=True`` for DataLoaders without it, and the
copies of the batches they pin made ``non_blocking``.

A copy from pageable memory is staged by the driver through a pinned buffer and the host waits for it
(CUDA C++ Programming Guide, "Page-Locked Host Memory"; PyTorch's "Use pinned memory buffers" note).
From pinned memory the copy is a DMA the host does not wait for, when asked: ``tensor.to(device,
non_blocking=True)``, also where the program wrote ``non_blocking=False`` (a parametrised training
script's default, not a need: the GPU's stream orders the copy before the kernels that read it). Only
the batches the loader pinned are made non-blocking: the loader's pin
thread fills a new pinned tensor for every batch, so nothing the program writes can race the copy,
which a pinned buffer the program reuses could.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, NotApplicable, change_dataloaders


def _tensors(batch: Any) -> list[Any]:
    """The tensors of a batch: a tensor, or lists, tuples, named tuples and dicts of them."""
    if hasattr(batch, "is_pinned") and hasattr(batch, "device"):
        return [batch]
    if isinstance(batch, Mapping):
        return [t for v in batch.values() for t in _tensors(v)]
    if isinstance(batch, (list, tuple)):
        return [t for v in batch for t in _tensors(v)]
    return []


class PinnedMemory(InjectedFix):
    name = FixName.PINNED
    rules = (RuleId.PAGEABLE_MEMCPY, RuleId.H2D_NOT_OVERLAPPED)
    describe = "DataLoader(pin_memory=True), and the copies of the batches it pins made non_blocking"

    def __init__(self) -> None:
        super().__init__()
        self.loaders = 0  # loaders given pin_memory=True
        self.copies = 0  # copies of pinned batches made non-blocking
        self.pinned_already = 0

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        if not torch.cuda.is_available():
            raise NotApplicable("no CUDA device: pinned host memory speeds copies to a GPU")

        fix = self
        # the pinned batch tensors, by id while they live (a WeakSet would compare tensors with ==)
        pinned_batches: dict[int, weakref.ref[Any]] = {}

        def remember(t: Any) -> None:
            key = id(t)
            pinned_batches[key] = weakref.ref(t, lambda _: pinned_batches.pop(key, None))

        def loader_pinned(t: Any) -> bool:
            r = pinned_batches.get(id(t))
            return r is not None and r() is t

        def pin(given: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any] | None:
            if given.get("pin_memory"):
                fix.pinned_already += 1
                return None
            given["pin_memory"] = True
            fix.loaders += 1
            return given

        change_dataloaders(pin)

        # the batches the loaders pin: what DataLoader's pin function returns, in the loop or in its pin
        # thread (both look it up in its module when they call it). Not by wrapping the iterators'
        # __next__: dlscope's own DataLoader hook puts back the __next__ it found, after the first batch
        pin_module = torch.utils.data._utils.pin_memory
        orig_pin = pin_module.pin_memory

        @functools.wraps(orig_pin)
        def pin_batch(data: Any, *args: Any, **kwargs: Any) -> Any:
            pinned = orig_pin(data, *args, **kwargs)
            for t in _tensors(pinned):
                if t.device.type == "cpu" and t.is_pinned():
                    remember(t)
            return pinned

        orig_to = torch.Tensor.to
        parse_to = torch._C._nn._parse_to

        @functools.wraps(orig_to)
        def to(t: Any, *args: Any, **kwargs: Any) -> Any:
            # (flags given by position, .to(device, dtype, False), are left as written)
            if loader_pinned(t) and not any(isinstance(a, bool) for a in args):
                device, _, non_blocking, _ = parse_to(*args, **kwargs)
                if device is not None and device.type == "cuda" and not non_blocking:
                    fix.copies += 1
                    kwargs["non_blocking"] = True
            return orig_to(t, *args, **kwargs)

        orig_cuda = torch.Tensor.cuda

        @functools.wraps(orig_cuda)
        def cuda(t: Any, *args: Any, **kwargs: Any) -> Any:
            if loader_pinned(t) and not kwargs.get("non_blocking") and len(args) < 2:
                fix.copies += 1
                kwargs["non_blocking"] = True
            return orig_cuda(t, *args, **kwargs)

        pin_module.pin_memory = pin_batch
        torch.Tensor.to = to
        torch.Tensor.cuda = cuda

    def outcome(self) -> tuple[bool, str]:
        self.changed = self.loaders + self.copies
        self.detail = {
            "loaders_pinned": self.loaders,
            "loaders_pinned_already": self.pinned_already,
            "copies_non_blocking": self.copies,
        }
        self.applied_as = f"{self.loaders} loader(s) pinned, {self.copies} copies non-blocking"
        if self.changed:
            return True, ""
        if self.pinned_already:
            return False, "the program's loaders already pin memory and its copies of them are already non-blocking"
        return False, "the program made no DataLoader (its copies come from elsewhere: pin those buffers in the source)"
