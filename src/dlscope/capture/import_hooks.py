"""Run a callback right after a module is imported (or now, if it already is).

Collectors that depend on a framework start when the program imports it: under
`dlscope profile` recording begins before the program has imported anything. The hook fires
after the module's code ran, not when its name is merely looked up (libraries probe for
optional packages with ``importlib.util.find_spec`` all the time, and a probe must not start
anything). It is a finder at the front of ``sys.meta_path`` that, for a watched name, asks the
other finders for the spec and wraps its loader; every other import passes through untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

_callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
_lock = threading.Lock()


class _Loader(importlib.abc.Loader):
    """Wraps the real loader; runs the callbacks once the module has executed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.inner.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _fire(module.__name__, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self._local = threading.local()

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name not in _callbacks or getattr(self._local, "busy", False):
            return None
        self._local.busy = True  # the other finders may import: do not look at those imports
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader)
                    return spec
            return None
        finally:
            self._local.busy = False


_finder = _Finder()


def _fire(name: str, module: ModuleType) -> None:
    with _lock:
        callbacks = _callbacks.pop(name, [])
        if not _callbacks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
    for cb in callbacks:
        try:
            cb(module)
        except Exception as e:  # a collector must never break the program's import
            sys.stderr.write(f"dlscope: could not start recording for {name}: {e}\n")


def when_imported(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Call ``callback(module)`` once ``name`` is imported; at once if it already is."""
    mod = sys.modules.get(name)
    if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
        callback(mod)
        return
    with _lock:
        _callbacks.setdefault(name, []).append(callback)
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)


def cancel(name: str, callback: Callable[[ModuleType], None]) -> None:
    with _lock:
        cbs = _callbacks.get(name, [])
        if callback in cbs:
            cbs.remove(callback)
        if not cbs:
            _callbacks.pop(name, None)
        if not _callbacks and _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
