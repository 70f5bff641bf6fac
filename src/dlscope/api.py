"""The Python entry point.

    import dlscope
    with dlscope.profile("run.dlscope", batch_size=64) as prof:
        for batch in data:
            with prof.phase("preprocess"): ...
            with prof.phase("run"): ...
            with prof.phase("postprocess"): ...
            prof.step()

The module-level :func:`phase`, :func:`step`, :func:`mark`, :func:`begin` and :func:`end` act on
the active profile and do (almost) nothing when there is none, so library code can be annotated
once and left annotated. Under ``dlscope profile -- python train.py`` a profile is already active
when the program starts; ``dlscope.profile(...)`` then joins it instead of starting another.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .capture.app import NULL_RANGE, NullRange, Range
from .capture.base import Settings
from .capture.session import Session


class Profile(threading.local):
    """Handle on a recording. It is a ``threading.local`` on purpose: each thread gets its own
    ``phase`` (a C-level dict lookup of that thread's ranges), which keeps a phase enter+exit to a
    few hundred nanoseconds; ``__init__`` runs once in every thread that uses the handle."""

    phase: Callable[[str], Range]

    def __init__(self, session: Session, owns: bool = True) -> None:
        self._session = session
        self._owns = owns
        self.phase = session.recorder.thread_ranges().__getitem__

    # ---- annotation --------------------------------------------------------------------------
    def begin(self, name: str) -> None:
        """Open phase ``name`` on this thread (close it with :meth:`end`)."""
        self.phase(name).__enter__()

    def end(self, name: str) -> None:
        """Close the innermost open phase ``name`` on this thread."""
        self.phase(name).__exit__(None, None, None)

    def mark(self, name: str) -> None:
        """Record an instant event."""
        self._session.recorder.mark(name)

    def step(self) -> int:
        """End the current iteration and begin the next; returns the new step's index."""
        return self._session.step()

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def path(self) -> Path:
        """Where the profile is written."""
        return self._session.profile_dir

    @property
    def session(self) -> Session:
        return self._session

    def start(self) -> Profile:
        global _current
        self._session.start()
        _current = self
        return self

    def stop(self) -> Path:
        """Stop recording; a profile this handle owns is finalized (written) now."""
        global _current
        if _current is self:
            _current = None
        if not self._owns:
            return self._session.profile_dir
        self._session.stop("exit")
        from .capture.finalize import finalize_profile

        finalize_profile(self._session.profile_dir)
        return self._session.profile_dir

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()


_current: Profile | None = None


def profile(path: str | Path = "run.dlscope", *, batch_size: int | None = None,
            steps: str | tuple[int | None, int | None] | None = None, warmup: int | None = None,
            mode: str = "default", detail_steps: int | None = None, torch: str = "auto", nvml: str = "auto",
            cupti: str = "auto", nvtx: bool = False, key_node: str | None = None) -> Profile:
    """Create a profile handle; use it as a context manager (or call start()/stop()).

    ``steps="A:B"`` records only steps A to B (inclusive); ``warmup=N`` flags the first N recorded
    steps as warm-up (default: 1 without a window, 0 with one). ``mode="full"`` adds input
    shapes and memory events to the PyTorch layer (Python stacks are not recorded). ``torch``,
    ``nvml`` and ``cupti`` are 'auto', 'on' or 'off'; ``nvtx=True`` also emits phases and steps as
    NVTX ranges.
    """
    from .capture.schedule import parse_steps
    from .errors import UsageError

    if mode not in ("default", "full"):
        raise UsageError(f"mode must be 'default' or 'full', got {mode!r}")
    window = parse_steps(steps) if isinstance(steps, str) else steps
    active = _current
    if active is not None and not active.session.stopped:
        # Joining the recording started by `dlscope profile`: its flags win, the code fills gaps.
        s = active.session.settings
        if s.batch_size is None and batch_size is not None:
            s.batch_size = batch_size
        return Profile(active.session, owns=False)
    settings = Settings(batch_size=batch_size, steps=window, warmup=warmup, mode=mode, detail_steps=detail_steps,
                        torch=torch,
                        nvml=nvml, cupti=cupti, nvtx=nvtx, key_node=key_node)
    return Profile(Session(path, settings, owner="api"))


def current() -> Profile | None:
    """The active profile, if any."""
    return _current


_null_ranges: dict[str, NullRange] = {"": NULL_RANGE}


def phase(name: str) -> Range | NullRange:
    """``with dlscope.phase("x"):`` or ``@dlscope.phase("x")`` on the active profile, if any."""
    p = _current
    if p is not None:
        return p.phase(name)
    nr = _null_ranges.get(name)
    if nr is None:
        nr = _null_ranges[name] = NullRange(name)
    return nr


def step() -> int:
    p = _current
    return p.step() if p is not None else -1


def mark(name: str) -> None:
    p = _current
    if p is not None:
        p.mark(name)


def begin(name: str) -> None:
    p = _current
    if p is not None:
        p.begin(name)


def end(name: str) -> None:
    p = _current
    if p is not None:
        p.end(name)
