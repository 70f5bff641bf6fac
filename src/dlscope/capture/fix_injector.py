"""Apply the fixes ``dlscope try`` asks for inside the profiled program, end the run after enough
steps, and keep the loss of every step for the numerics check.

Settings (``Settings.try_run``, a :class:`.base.TryRun`): ``fixes`` (names in :data:`.fixes.BY_NAME`),
``fix_options`` (per fix name, what try knows for it: ``FixContext.options``), ``stop_after_step``
(the program is ended with ``SystemExit(0)`` when that step begins: the measured steps are done
and the rest of the run would only cost time) and ``record_loss``. Each fix is installed when the
program imports torch; the collector's settings in the profile's ``meta.json`` say which applied
and why not, and hold the losses (the scalar each ``backward`` started from), read with
``.item()`` only at the end of the run so that no step waits for them.
"""

from __future__ import annotations

import functools
import math
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import CollectorUnavailable
from ..vocabulary.names import FixName
from . import turn
from .base import Collector, Settings, TryRun
from .import_hooks import cancel, when_imported
from .schedule import Action

if TYPE_CHECKING:
    from .fixes import InjectedFix
    from .session import Session


class FixInjector(Collector):
    name = "fixes"
    layers = ()
    scope = "process"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.session: Session | None = None
        run = settings.try_run or TryRun()
        self.wanted_fixes: list[FixName] = list(run.fixes)
        self.stop_after: int | None = run.stop_after_step
        self.record_loss = run.record_loss
        self.fixes: list[InjectedFix] = []
        self.not_applied: dict[FixName, str] = {}
        self.losses: list[tuple[int, Any]] = []
        self._restore: list[tuple[Any, str, Any]] = []
        self._ctx: Any = None
        self._step = 0
        self._fwd_hook: list[Any] = []
        self._global_fwd: list[Any] = []
        self.result: dict[str, Any] = {}

    def wanted(self) -> bool:
        return bool(self.wanted_fixes or self.stop_after is not None or self.record_loss)

    def start(self, session: Session) -> None:
        from .fixes import BY_NAME

        unknown = [f for f in self.wanted_fixes if f not in BY_NAME]
        if unknown:
            raise CollectorUnavailable(f"unknown fix {unknown[0]!r}")
        self.session = session
        when_imported("torch", self._on_torch)

    def _on_torch(self, torch: ModuleType) -> None:
        from .fixes import BY_NAME, FixContext, NotApplicable

        self._ctx = ctx = FixContext()
        ctx.options = dict(self.settings.try_run.fix_options) if self.settings.try_run else {}
        for name in self.wanted_fixes:
            fix = BY_NAME[name]()
            try:
                fix.install(torch, ctx)
            except NotApplicable as e:
                self.not_applied[name] = str(e)
                continue
            except Exception as e:  # a fix must never break the program: it is reported instead
                self.not_applied[name] = f"could not install: {e.__class__.__name__}: {e}"
                continue
            self.fixes.append(fix)
        if ctx.before_backward or self.record_loss:
            self._wrap_backward(torch)
        if ctx.first_forward:
            self._hook_outermost_forward(torch)

    def _wrap_backward(self, torch: ModuleType) -> None:
        orig = torch.autograd.backward
        injector = self

        @functools.wraps(orig)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            for f in injector._ctx.before_backward:
                f()
            if injector.record_loss and isinstance(tensors, torch.Tensor) and tensors.numel() == 1:
                injector.losses.append((injector._step, tensors.detach().clone()))
            return orig(tensors, *args, **kwargs)

        torch.autograd.backward = backward
        self._restore.append((torch.autograd, "backward", orig))

    def _hook_outermost_forward(self, torch: ModuleType) -> None:
        """Run ``ctx.first_forward`` at each outermost module call. Global module hooks find the
        outermost modules in the first step; at the first step boundary they give way to hooks on
        those modules alone (a global hook sends every submodule call through the slow path of
        ``Module._call_impl``: a cost the unchanged runs would not pay, biasing the measurement)."""
        from torch.nn.modules import module as nn_module

        depth = [0]
        ctx = self._ctx
        tops: list[Any] = []

        def pre(module: Any, args: Any) -> Any:
            depth[0] += 1
            if depth[0] != 1:
                return None
            if self._global_fwd and not any(m is module for m in tops):
                tops.append(module)
            out = None
            for f in ctx.first_forward:
                got = f(module, args if out is None else out)
                out = got if got is not None else out
            return out

        def post(module: Any, args: Any, output: Any) -> None:
            depth[0] = max(depth[0] - 1, 0)

        def narrow() -> None:
            if not self._global_fwd or not tops or depth[0]:
                return
            for h in self._global_fwd:
                h.remove()
            self._global_fwd = []
            for m in tops:
                self._fwd_hook += [m.register_forward_pre_hook(pre), m.register_forward_hook(post, always_call=True)]

        self._global_fwd = [
            nn_module.register_module_forward_pre_hook(pre),
            nn_module.register_module_forward_hook(post, always_call=True),
        ]
        ctx.on_step_start.append(narrow)

    def on_step(self, step: int, action: Action) -> None:
        self._step = step
        if self._ctx is not None:
            for f in self._ctx.on_step_start:
                f()
        if self.stop_after is not None and step >= self.stop_after:
            if self.session is not None:
                turn.mark_measured(self.session.profile_dir)
            raise SystemExit(0)  # the measured steps are done: end the run here (dlscope try)

    def stop(self) -> None:
        cancel("torch", self._on_torch)
        for h in self._fwd_hook + self._global_fwd:
            h.remove()
        for owner, attr, orig in reversed(self._restore):
            setattr(owner, attr, orig)
        status: dict[str, dict[str, object]] = {}
        for fix in self.fixes:
            try:
                applied, why = fix.outcome()
            except Exception as e:  # noqa: BLE001
                applied, why = False, f"{e.__class__.__name__}: {e}"
            status[fix.name] = {
                "applied": applied,
                "reason": why,
                "changed": fix.changed,
                "changes_precision": fix.changes_precision,
                "detail": fix.detail,
                "applied_as": fix.applied_as,
                "weaker": fix.weaker,
            }
        for name, why in self.not_applied.items():
            status[name] = {"applied": False, "reason": why, "changed": 0}
        losses = []
        for step, t in self.losses:
            try:
                v = float(t.item())
            except Exception:  # noqa: BLE001
                continue
            losses.append([step, v if math.isfinite(v) else str(v)])
        self.result = {"fixes": status, "losses": losses}

    def describe(self) -> dict[str, Any]:
        """What ``dlscope try`` reads back from the profile's meta.json (collectors.fixes.settings):
        the fixes asked for, how each went, and the losses."""
        return {"asked": self.wanted_fixes, "stop_after_step": self.stop_after, **self.result}
