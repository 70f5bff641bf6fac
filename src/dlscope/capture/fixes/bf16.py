"""bf16 autocast over each step's forward pass and loss.

The autocast region opens when a step begins (and when torch is imported, for the first step) and
closes right before ``backward`` (the backward pass follows the forward's dtypes; the optimizer
step stays outside), as PyTorch's AMP recipe places it. Leaving the outermost autocast region
clears its weight-cast cache, so every step casts the weights it updated afresh: a cache kept
across steps would serve the previous step's weights."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .base import FixContext, InjectedFix, NotApplicable


class Bf16Autocast(InjectedFix):
    name = "bf16"
    rules = ("amp_not_enabled",)
    describe = "torch.autocast('cuda', dtype=torch.bfloat16) around each step's forward pass and loss"
    changes_precision = True

    def __init__(self) -> None:
        super().__init__()
        self._region: Any = None
        self._device = "cuda"

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        if self._device == "cuda" and not torch.cuda.is_bf16_supported():
            raise NotApplicable("this GPU has no bf16 support")
        self._torch = torch
        ctx.on_step_start.append(self.open)
        ctx.before_backward.append(self.close)
        self.open()

    def open(self) -> None:
        if self._region is None:
            self._region = self._torch.autocast(self._device, dtype=self._torch.bfloat16)
            self._region.__enter__()
            self.changed += 1

    def close(self) -> None:
        if self._region is not None:
            region, self._region = self._region, None
            region.__exit__(None, None, None)  # the outermost region's exit clears the cast cache

    def outcome(self) -> tuple[bool, str]:
        self.close()
        return (True, "") if self.changed > 1 else (False, "no step began under autocast (no backward pass ran)")
