"""Module calls in the traced steps: which ``torch.nn.Module`` ran when, for the module view.

Global module hooks were dropped from every step as too costly (a global hook sends every submodule
call through ``Module._call_impl``'s slow path: :mod:`.torch_hooks`), and Kineto's module events
(``with_modules``) cover TorchScript only. So the PyTorch layer (:mod:`.torch`) installs a global
forward pre-hook and post-hook for the traced steps alone, from the first traced step after the
warm-up to the end of the traced window, and removes them then: the untraced steps, whose times the
statistics read, never pay for them. ``bench/hook_costs.py`` measures what a call costs
(``bench/RESULTS.md``).

A hook only appends ``(module, thread, time)`` to a list (the post-hook ``None`` for the module):
no lookup, no lock. When the window ends, the calls are paired per thread (they nest) and named:
a call's path is its caller's path, a dot and the attribute path from the calling module to the
module (``named_modules()`` of the caller), so a block reached as ``self.h[3]`` is ``h.3`` under
its caller and a module shared by two parents is named where it was called. A root call (no
module call open on its thread) is named by its class (``GPT``; a second root object of the same
class ``GPT#2``), unless the module was called inside another before: then it keeps that path (the
forward that activation checkpointing runs again during backward, on the autograd thread, calls the
blocks with no module call open there). The calls go into the spool as JSON (``PID.modules.N.json``, one per window) and
become the ``module_calls`` table at finalize.

Backward is not hooked (full backward hooks wrap every module's inputs and outputs in autograd
functions): the analysis attributes backward ops to the module whose forward op has their
autograd sequence number (:mod:`dlscope.analysis.measures.modules`).

A program that has compiled with ``torch.compile`` before the hooks would go in gets none: a
compiled module called while global hooks exist warns the user on every call (the hooks fire on
the wrapper), and its submodules run inside the graph, where no hook fires anyway.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store import spool

if TYPE_CHECKING:
    import pyarrow as pa

SPOOL_GLOB = "{pid}.modules.*.json"


def spool_path(spool_dir: Path, pid: int, window: int) -> Path:
    return spool_dir / f"{pid}.modules.{window}.json"


def compiled_frames() -> int:
    """Frames ``torch.compile`` has compiled in this process so far (0 when dynamo is not loaded)."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return 0
    try:
        return int(counters["frames"]["ok"])
    except (KeyError, TypeError, ValueError):
        return 0


class ModuleCallRecorder:
    """Installs the global module hooks, collects the calls, and names them at :meth:`remove`."""

    def __init__(self, torch: Any, clock: Callable[[], int], compiling: Callable[[], bool]) -> None:
        self._torch = torch
        self._clock = clock
        self._compiling = compiling
        self._events: list[tuple[Any, int, int]] = []
        self._handles: list[Any] = []
        self.calls = 0  # calls recorded over all windows (meta.json)
        self.reason_off = ""

    @property
    def installed(self) -> bool:
        return bool(self._handles)

    def install(self) -> bool:
        """Put the hooks in; False (and :attr:`reason_off`) when they must stay out."""
        if self.installed:
            return True
        if compiled_frames():
            self.reason_off = "the program compiled with torch.compile before the traced steps"
            return False
        from torch.nn.modules import module as nn_module

        append, now, tid, compiling = self._events.append, self._clock, threading.get_native_id, self._compiling

        def pre(module: Any, args: Any) -> None:
            if not compiling():
                append((module, tid(), now()))

        def post(module: Any, args: Any, output: Any) -> None:
            if not compiling():
                append((None, tid(), now()))

        self._handles.append(nn_module.register_module_forward_pre_hook(pre))
        try:
            self._handles.append(nn_module.register_module_forward_hook(post, always_call=True))
        except TypeError:  # a torch without always_call: a call that raises stays open (closed at pairing)
            self._handles.append(nn_module.register_module_forward_hook(post))
        return True

    def remove(self) -> dict[str, Any]:
        """Take the hooks out and return the window's calls, named (see :func:`name_calls`)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        events, self._events = self._events, []
        out = name_calls(events)
        self.calls += len(out["start"])
        return out

    def write(self, spool_dir: Path, pid: int, window: int) -> None:
        """Remove the hooks and write the window's calls into the spool (atomically)."""
        spool.write_json_atomic(spool_path(spool_dir, pid, window), self.remove())


def name_calls(events: list[tuple[Any, int, int]]) -> dict[str, Any]:
    """Pair enter/exit events per thread and name each call: columns ``tid``, ``start``, ``end``
    (the clock's ns), ``depth``, ``path`` and ``type`` (indexes into ``paths`` and ``types``)."""
    stacks: dict[int, list[int]] = {}  # per thread: indexes of the open calls
    mods: list[Any] = []
    tid: list[int] = []
    start: list[int] = []
    end: list[int] = []
    depth: list[int] = []
    path: list[int] = []
    paths: dict[str, int] = {}
    types: dict[str, int] = {}
    type_of: list[int] = []
    children: dict[int, dict[int, str]] = {}  # id(calling module) -> id(descendant) -> relative name
    roots: dict[int, str] = {}  # id(root module) -> its label
    seen: dict[int, str] = {}  # id(module) -> its path where a module called it
    root_classes: dict[str, int] = {}
    last = max((t for _, _, t in events), default=0)

    def relative(parent: Any, module: Any) -> str | None:
        names = children.get(id(parent))
        if names is None:
            try:
                names = {id(m): n for n, m in parent.named_modules() if n}
            except Exception:  # a module whose named_modules fails: name by class below
                names = {}
            children[id(parent)] = names
        return names.get(id(module))

    def root_label(module: Any) -> str:
        label = roots.get(id(module))
        if label is None:
            cls = type(module).__name__
            n = root_classes[cls] = root_classes.get(cls, 0) + 1
            label = roots[id(module)] = cls if n == 1 else f"{cls}#{n}"
        return label

    def intern(table: dict[str, int], value: str) -> int:
        i = table.get(value)
        if i is None:
            i = table[value] = len(table)
        return i

    path_text: list[str] = []
    for module, thread, t in events:
        stack = stacks.setdefault(thread, [])
        if module is None:
            if stack:
                end[stack.pop()] = t
            continue
        if stack:
            parent = stack[-1]
            rel = relative(mods[parent], module)
            text = seen[id(module)] = f"{path_text[parent]}.{rel if rel is not None else type(module).__name__}"
        else:
            text = seen.get(id(module)) or root_label(module)
        i = len(mods)
        mods.append(module)
        path_text.append(text)
        tid.append(thread)
        start.append(t)
        end.append(last)  # an unclosed call (a raise on a torch without always_call) ends with the window
        depth.append(len(stack))
        path.append(intern(paths, text))
        type_of.append(intern(types, type(module).__name__))
        stack.append(i)
    return {
        "tid": tid,
        "start": start,
        "end": end,
        "depth": depth,
        "path": path,
        "type": type_of,
        "paths": list(paths),
        "types": list(types),
    }


def decode(spool_dir: Path, pid: int, rank: int, offset_ns: int) -> pa.Table | None:
    """The ``module_calls`` rows of one process (text name columns), or None when it wrote none."""
    import json

    import pyarrow as pa

    parts = []
    for f in sorted(spool_dir.glob(SPOOL_GLOB.format(pid=pid))):
        try:
            d = json.loads(f.read_text())
            paths, types = d["paths"], d["types"]
            n = len(d["start"])
            parts.append(
                pa.table(
                    {
                        "rank": pa.array([rank] * n, pa.int32()),
                        "pid": pa.array([pid] * n, pa.int64()),
                        "tid": pa.array(d["tid"], pa.int64()),
                        "start_ns": pa.array([v + offset_ns for v in d["start"]], pa.int64()),
                        "end_ns": pa.array([v + offset_ns for v in d["end"]], pa.int64()),
                        "name": pa.array([paths[i] for i in d["path"]], pa.string()),
                        "type": pa.array([types[i] for i in d["type"]], pa.string()),
                        "depth": pa.array(d["depth"], pa.int16()),
                    }
                )
            )
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue  # a damaged window file: the others still count
    return pa.concat_tables(parts) if parts else None
