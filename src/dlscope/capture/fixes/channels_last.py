"""channels_last memory format for models with 2-D convolutions: the model's weights and 4-D
inputs in NHWC, so cuDNN runs its NHWC kernels without layout conversions."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix


class ChannelsLast(InjectedFix):
    name = FixName.CHANNELS_LAST
    rules = (RuleId.LAYOUT_TRANSPOSES,)
    describe = "model and 4-D inputs in torch.channels_last"

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        self._torch = torch
        self._done: set[int] = set()
        ctx.first_forward.append(self.convert)

    def convert(self, module: Any, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        torch = self._torch
        if id(module) not in self._done:
            self._done.add(id(module))
            if any(isinstance(m, torch.nn.Conv2d) for m in module.modules()):
                module.to(memory_format=torch.channels_last)
                self.changed += 1
        if not self.changed:
            return None
        return tuple(
            a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4 else a
            for a in args
        )

    def outcome(self) -> tuple[bool, str]:
        return (True, "") if self.changed else (False, "the model has no 2-D convolution")
