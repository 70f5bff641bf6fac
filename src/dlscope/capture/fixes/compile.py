"""``torch.compile`` of each outermost module (only when named: compiling takes a while, which the
warm-up steps must cover)."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix


class Compile(InjectedFix):
    name = FixName.COMPILE
    rules: ClassVar[tuple[RuleId, ...]] = (RuleId.LAUNCH_BOUND, RuleId.FUSION_CANDIDATES)
    describe = "torch.compile of the outermost module's forward"
    on_request_only = True
    mode: str | None = None  # torch.compile's mode

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        self._torch = torch
        self._done: set[int] = set()
        ctx.first_forward.append(self.compile)

    def compile(self, module: Any, args: tuple[Any, ...]) -> None:
        if id(module) in self._done:
            return None
        self._done.add(id(module))
        module.forward = self._torch.compile(module.forward, **({"mode": self.mode} if self.mode else {}))
        self.changed += 1
        return None

    def outcome(self) -> tuple[bool, str]:
        return (True, "") if self.changed else (False, "no module's forward ran")
