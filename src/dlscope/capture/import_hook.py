"""A post-import hook: call a function right after one of some named modules has been imported.

It fires after the module's code ran, not when its name is merely looked up: libraries probe
for optional packages with ``importlib.util.find_spec`` all the time, and a probe must not
start anything. The hook is a finder at the front of ``sys.meta_path`` that, for a watched
name, asks the other finders for the spec and wraps its loader; every other import passes
through untouched (one set lookup).
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any


class _NotifyingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then reports the module as imported."""

    def __init__(self, inner: Any, notify: Callable[[str], None]) -> None:
        self._inner = inner
        self._notify = notify

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._notify(module.__name__)

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, get_code ...
        return getattr(self._inner, name)


class PostImportHook(importlib.abc.MetaPathFinder):
    """Calls ``callback(name)`` once per watched module, after it is imported. ``install`` puts
    it first on ``sys.meta_path``; ``remove`` takes it off."""

    def __init__(self, names: Iterable[str], callback: Callable[[str], None]) -> None:
        self.names = frozenset(names)
        self.callback = callback
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.names or getattr(self._local, "busy", False):
            return None
        self._local.busy = True  # the other finders may import; do not look at those imports
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._local.busy = False
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # namespace packages and legacy loaders: let the normal machinery do it
        spec.loader = _NotifyingLoader(spec.loader, self._notify)
        return spec

    def _notify(self, name: str) -> None:
        try:
            self.callback(name)
        except Exception:
            pass  # a profiler hook must never break the program's import

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
