"""Fused Adam, AdamW and SGD (``fused=True``) for optimizers over CUDA parameters: one kernel per
parameter group instead of one per parameter and operation."""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix

FUSED = ("Adam", "AdamW", "SGD")


class FusedOptimizer(InjectedFix):
    name = FixName.FUSED_OPT
    rules = (RuleId.UNFUSED_OPTIMIZER,)
    describe = "torch.optim.Adam/AdamW/SGD(..., fused=True) for CUDA parameters"

    def __init__(self) -> None:
        super().__init__()
        self.skipped: list[str] = []

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        fix = self
        for name in FUSED:
            cls = getattr(torch.optim, name)
            orig = cls.__init__

            def init(opt: Any, params: Any, *args: Any, _orig: Any = orig, _name: str = name, **kwargs: Any) -> None:
                params = list(params)
                if kwargs.get("fused") or not _all_cuda(torch, params):
                    fix.skipped.append(
                        f"{_name}: already fused" if kwargs.get("fused") else f"{_name}: parameters not all on CUDA"
                    )
                    _orig(opt, params, *args, **kwargs)
                    return
                kwargs["fused"] = True
                kwargs.pop("foreach", None)
                fix.changed += 1
                _orig(opt, params, *args, **kwargs)

            cls.__init__ = functools.wraps(orig)(init)

    def outcome(self) -> tuple[bool, str]:
        if self.changed:
            return True, ""
        return False, (
            "no Adam, AdamW or SGD over CUDA parameters was made" + (f" ({self.skipped[0]})" if self.skipped else "")
        )


def _all_cuda(torch: ModuleType, params: list[Any]) -> bool:
    tensors = [t for g in params for t in (g["params"] if isinstance(g, dict) else [g])]
    return bool(tensors) and all(isinstance(t, torch.Tensor) and t.is_cuda and t.is_floating_point() for t in tensors)
