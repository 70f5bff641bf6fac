"""The application-layer recorder: phases, marks and step boundaries, in the profiled program.

The hot path is ``with prof.phase("x"):``. It must cost a few hundred nanoseconds, so:

* ``prof.phase`` is the C-level ``__getitem__`` of a per-thread dict of ranges (the Profile
  handle is a ``threading.local``), so no Python function runs to find the range;
* each (thread, name) pair has its own :class:`Range` with its own list; entering appends the
  monotonic time, leaving appends its negation. No tuple, no thread lookup, no lock;
* the flusher thread takes what has been appended (``lst[:n]`` then ``del lst[:n]``: appends
  from other threads only ever land after index ``n``) and writes it to the spool.

Pairing enters with exits, nesting depth and epoch conversion all happen at finalize.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any, Literal, TypeVar

from ..store import spool

F = TypeVar("F", bound=Callable[..., Any])

# Where events go while recording is paused: a deque that keeps nothing, with a C append.
_DISCARD: deque[int] = deque(maxlen=0)


def _wrap(fn: F, name: str, resolve: Callable[[str], Any]) -> F:
    """Decorator body shared by Range and NullRange: the range is looked up at call time, so a
    function decorated at import time is recorded by whichever profile is active when it runs,
    on whichever thread runs it."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with resolve(name):
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]  # functools.wraps keeps fn's signature; mypy sees the wrapper's


def _no_active_phase(name: str) -> NullRange:
    return NULL_RANGE


# The active profile's phase lookup, which a decorated function resolves its range with when it runs.
# capture.handle, which keeps the active profile, installs its `phase` here when it loads (the dependency
# goes handle -> app only); a Range or NullRange reaches a decorator through handle, so it is in place by
# then. Before it loads no profile can be active, and a decorated function records nothing.
_active_phase: Callable[[str], Range | NullRange] = _no_active_phase


def set_active_phase(lookup: Callable[[str], Range | NullRange]) -> None:
    """Install the active profile's phase lookup (called once, by :mod:`.handle`)."""
    global _active_phase
    _active_phase = lookup


class Range:
    """Context manager recording one named phase on one thread. The clock is bound as a default
    argument of __enter__/__exit__ (see :func:`range_type`): the fastest lookup Python has."""

    __slots__ = ("_append", "events", "name", "name_id", "tid")

    def __init__(self, name: str, name_id: int, tid: int, recording: bool) -> None:
        self.name = name
        self.name_id = name_id
        self.tid = tid
        self.events: list[int] = []
        self._append = self.events.append if recording else _DISCARD.append

    def __enter__(self) -> Range:  # replaced per clock by range_type()
        raise NotImplementedError

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        raise NotImplementedError

    def __call__(self, fn: F) -> F:
        return _wrap(fn, self.name, _active_phase)

    def set_recording(self, on: bool) -> None:
        self._append = self.events.append if on else _DISCARD.append


_range_types: dict[Callable[[], int], type[Range]] = {}


def range_type(clock: Callable[[], int]) -> type[Range]:
    """The Range class reading ``clock`` (perf_counter_ns in real use; a fake one in tests)."""
    cls = _range_types.get(clock)
    if cls is None:

        class ClockedRange(Range):
            __slots__ = ()

            def __enter__(self, _now: Callable[[], int] = clock) -> Range:
                self._append(_now())
                return self

            def __exit__(self, exc_type: Any, exc: Any, tb: Any, _now: Callable[[], int] = clock) -> Literal[False]:
                self._append(-_now())
                return False

        cls = _range_types[clock] = ClockedRange
    return cls


class NullRange:
    """What phase() returns when nothing is being recorded: does nothing, as cheaply as possible."""

    __slots__ = ("name",)

    def __init__(self, name: str = "") -> None:
        self.name = name

    def __enter__(self) -> NullRange:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        return False

    def __call__(self, fn: F) -> F:
        return _wrap(fn, self.name, _active_phase)


NULL_RANGE = NullRange()


class _ThreadRanges(dict[str, "Range"]):
    """name -> Range for one thread; a miss creates and registers the Range."""

    def __init__(self, recorder: AppRecorder) -> None:
        super().__init__()
        self._recorder = recorder
        self._tid = threading.get_native_id()

    def __missing__(self, name: str) -> Range:
        rng = self._recorder.new_range(name, self._tid)
        self[name] = rng
        return rng


class AppRecorder:
    """Owns every Range, the interned names, marks and step boundaries of one process."""

    def __init__(self, clock: Callable[[], int] = perf_counter_ns) -> None:
        self.clock = clock
        self._range_cls = range_type(clock)
        self._lock = threading.Lock()
        self._names: dict[str, int] = {}
        self._new_names: list[tuple[int, str]] = []
        self._ranges: list[Range] = []
        self._marks: list[tuple[int, int, int]] = []  # (name_id, tid, t)
        self._steps: list[tuple[int, int, int]] = []  # (source, tid, t)
        self.recording = True
        self.step_count = 0  # boundaries so far (of the source in use) = index of the running step
        self.explicit_steps = False  # the program calls step() itself
        # also told every boundary as it happens, (source, tid, t): the session's step ledger,
        # which outlives a SIGKILL (store.spool.StepLedgerWriter)
        self.on_step: Callable[[int, int, int], None] | None = None

    # ---- names -------------------------------------------------------------------------------
    def intern(self, name: str) -> int:
        nid = self._names.get(name)
        if nid is None:
            with self._lock:
                nid = self._names.get(name)
                if nid is None:
                    nid = self._names[name] = len(self._names)
                    self._new_names.append((nid, name))
        return nid

    # ---- ranges ------------------------------------------------------------------------------
    def thread_ranges(self) -> _ThreadRanges:
        return _ThreadRanges(self)

    def new_range(self, name: str, tid: int) -> Range:
        if not isinstance(name, str):
            raise TypeError(f"phase name must be a str, not {type(name).__name__}")
        rng = self._range_cls(name, self.intern(name), tid, self.recording)
        with self._lock:
            self._ranges.append(rng)
        return rng

    def use_range_class(self, cls: type[Range]) -> None:
        """Make ranges created from now on instances of ``cls`` (a subclass of the clocked Range
        class, e.g. one that also emits NVTX). Chosen once, so the default path has no branch."""
        self._range_cls = cls

    @property
    def range_class(self) -> type[Range]:
        return self._range_cls

    def set_recording(self, on: bool) -> None:
        with self._lock:
            self.recording = on
            for rng in self._ranges:
                rng.set_recording(on)

    # ---- marks and steps ---------------------------------------------------------------------
    def mark(self, name: str) -> None:
        if self.recording:
            self._marks.append((self.intern(name), threading.get_native_id(), self.clock()))

    def step_boundary(self, source: int = spool.STEP_EXPLICIT) -> int | None:
        """Record a step boundary; returns the index of the step that starts now, or None when
        the boundary does not count (an optimizer step in a program that calls step() itself).

        Both kinds are spooled with their source; finalize uses explicit steps when there are
        any. Live decisions (the step window) follow the same rule: the first explicit step()
        restarts the count."""
        boundary = (source, threading.get_native_id(), self.clock())
        self._steps.append(boundary)
        if self.on_step is not None:
            self.on_step(*boundary)
        if source == spool.STEP_EXPLICIT:
            if not self.explicit_steps:
                self.explicit_steps = True
                self.step_count = 0
        elif self.explicit_steps:
            return None
        self.step_count += 1
        return self.step_count

    # ---- flushing ----------------------------------------------------------------------------
    def drain(self) -> tuple[list[tuple[int, int, int, list[int]]], list[tuple[int, str]]]:
        """Take everything recorded since the last drain: (spool blocks, new names)."""
        blocks: list[tuple[int, int, int, list[int]]] = []
        with self._lock:
            ranges = list(self._ranges)
            names, self._new_names = self._new_names, []
        for rng in ranges:
            ev = rng.events
            n = len(ev)
            if n:
                chunk = ev[:n]
                del ev[:n]
                blocks.append((spool.PHASE, rng.name_id, rng.tid, chunk))
        for src, kind in ((self._marks, spool.MARK), (self._steps, spool.STEP)):
            n = len(src)
            if not n:
                continue
            items = src[:n]
            del src[:n]
            groups: dict[tuple[int, int], list[int]] = {}
            for item in items:
                groups.setdefault((item[0], item[1]), []).append(item[-1])
            blocks += [(kind, a, b, ts) for (a, b), ts in groups.items()]
        return blocks, names
