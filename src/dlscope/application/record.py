"""The in-process recording use case: ``dlscope.profile(...)`` and the annotations of its handle.

The handle, its session and the annotation functions are capture's (``capture/handle.py``); this is
where the public API takes them from, with the settings checked as ``dlscope profile`` checks its flags.
"""

from __future__ import annotations

from pathlib import Path

from ..capture.base import Settings
from ..capture.handle import Profile, begin, current, end, mark, phase, step
from ..capture.session import Session

__all__ = ["Profile", "begin", "current", "end", "mark", "phase", "recording", "step"]


def recording(path: str | Path, settings: Settings) -> Profile:
    """A handle recording into ``path`` with ``settings``, or one joining the recording ``dlscope
    profile`` started in this process (its flags win; the code fills what they left open)."""
    active = current()
    if active is not None and not active.session.stopped:
        s = active.session.settings
        if s.batch_size is None and settings.batch_size is not None:
            s.batch_size = settings.batch_size
        return Profile(active.session, owns=False)
    return Profile(Session(path, settings, owner="api"))


def step_range(text: str) -> tuple[int | None, int | None]:
    """``A:B`` -> the inclusive step range (a UsageError for anything else)."""
    from .profile import step_window

    return step_window(text)
