"""dlscope: profile a Python deep-learning program through every layer of its stack.

See :mod:`dlscope.api` for the recording API and ``dlscope --help`` for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Profile", "__version__", "begin", "current", "end", "mark", "phase", "profile", "step"]

if TYPE_CHECKING:
    from .api import Profile, begin, current, end, mark, phase, profile, step


def __getattr__(name: str) -> Any:
    # The recording API loads the collectors (0.1-0.2 s): loaded on first use, so the analysis
    # commands, which never record, start without it.
    if name in __all__ and name != "__version__":
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'dlscope' has no attribute {name!r}")
