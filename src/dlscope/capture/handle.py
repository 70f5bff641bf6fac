"""The recording handle and the active recording: :class:`Profile`, and :func:`phase`, :func:`step`,
:func:`mark`, :func:`begin` and :func:`end` acting on the active one (doing almost nothing when there is
none). :mod:`dlscope.api` (the front door) exports them; :mod:`.child` makes the handle that a
``dlscope profile`` child records with, and a :class:`~.app.Range` used as a decorator finds the active
profile here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .app import NULL_RANGE, NullRange, Range, set_active_phase
from .session import Session


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
        from .finalize import finalize_profile

        finalize_profile(self._session.profile_dir)
        return self._session.profile_dir

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop()


_current: Profile | None = None


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


set_active_phase(phase)


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
