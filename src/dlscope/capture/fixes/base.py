"""What a fix that ``dlscope try`` injects is: a name, the advice rules it answers, what it changes,
and ``install(torch, ctx)``, which changes the running program without touching its source.

Fixes are installed in the profiled process when it imports torch (through dlscope's bootstrap,
as the recording itself). A fix that cannot apply raises :class:`NotApplicable` with the reason;
one that applies but finds nothing to change (no DataLoader without workers was ever made) says so
through :meth:`InjectedFix.outcome` at the end of the run.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, ClassVar

from ...vocabulary.names import FixName, RuleId


class NotApplicable(Exception):
    """The fix cannot apply to this program; the message says why."""


class FixContext:
    """What fixes share in one process: the hooks that mark where autocast regions open and close,
    and the step boundaries. Filled by :class:`~dlscope.capture.fix_injector.FixInjector`."""

    def __init__(self) -> None:
        self.on_step_start: list[Any] = []  # callables run at each step boundary (a new step begins)
        self.before_backward: list[Any] = []  # callables run right before torch.autograd.backward
        self.first_forward: list[Any] = []  # callables (module, args) -> args | None, at the outermost forward
        # per fix name, what dlscope try knows for it (Settings.try_run.fix_options): the advice's
        # predicted saving ('predicted_saving_pct') sizes a fix that has a size (DataLoader workers)
        self.options: dict[FixName, dict[str, Any]] = {}


class InjectedFix:
    name: ClassVar[FixName]
    rules: ClassVar[tuple[RuleId, ...]] = ()  # the advice rules whose change this is
    describe: ClassVar[str] = ""
    changes_precision: ClassVar[bool] = False
    on_request_only: ClassVar[bool] = False  # slow to start (torch.compile): only when named

    def __init__(self) -> None:
        self.changed = 0  # how many objects (loaders, optimizers, modules) it changed
        self.detail: dict[str, Any] = {}  # what it applied, for try's JSON (e.g. num_workers)
        self.applied_as = ""  # the same in a few words for try's table ("4 workers")
        # why the change applied is weaker than the one the advice predicted for ('' when it is not):
        # then a measured saving below the prediction does not make the prediction wrong
        self.weaker = ""

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        raise NotImplementedError

    def outcome(self) -> tuple[bool, str]:
        """(applied, reason when not): called at the end of the run."""
        return True, ""


# A loader's arguments as given (by name), and DataLoader's defaults: the new arguments, or None to make the
# loader as the program asked.
LoaderChange = Callable[[dict[str, Any], Mapping[str, Any]], "dict[str, Any] | None"]


def change_dataloaders(change: LoaderChange) -> None:
    """Make every DataLoader the program creates from here on through ``change``: it sees the arguments the
    program gave (by name, positional ones included) and DataLoader's defaults, and returns the arguments to
    make the loader with, or None to leave the call as it was. (The fixes that change loaders: workers,
    pinned memory, a larger batch.)"""
    from torch.utils.data import DataLoader

    orig = DataLoader.__init__
    sig = inspect.signature(orig)
    defaults = {n: p.default for n, p in sig.parameters.items() if p.default is not inspect.Parameter.empty}

    @functools.wraps(orig)
    def init(loader: Any, dataset: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = sig.bind(loader, dataset, *args, **kwargs)
        except TypeError:
            return orig(loader, dataset, *args, **kwargs)  # let DataLoader report the bad call itself
        given = dict(bound.arguments)
        given.pop("self", None)
        extra = given.pop("kwargs", {}) if "kwargs" in sig.parameters else {}
        new = change(given, defaults)
        if new is None:
            return orig(loader, dataset, *args, **kwargs)
        return orig(loader, **new, **extra)

    DataLoader.__init__ = init  # type: ignore[method-assign,assignment]  # the injected fix: a wrapper of torch's own
