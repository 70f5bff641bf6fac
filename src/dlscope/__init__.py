"""dlscope: profile a Python deep-learning program through every layer of its stack.

See :mod:`dlscope.api` for the recording API and ``dlscope --help`` for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .vocabulary.version import __version__

if TYPE_CHECKING:
    from .api import Profile, begin, current, end, mark, phase, profile, step
    from .notebook import Analysis, open  # noqa: A004 - dlscope.open, the analysis API

__all__ = ["Analysis", "Profile", "__version__", "begin", "current", "end", "mark", "open", "phase", "profile", "step"]
_API = frozenset(__all__) - {"__version__", "open", "Analysis"}


def __getattr__(name: str) -> Any:
    """The recording API, loaded on first use: the command line and the importers never need it
    (it brings in every collector: 0.1 s of each command's start-up); ``open`` and ``Analysis``,
    the analysis API (:mod:`dlscope.notebook`), likewise."""
    if name in ("open", "Analysis"):
        from . import notebook

        value = getattr(notebook, name)
        globals()[name] = value
        return value
    if name in _API:
        from . import api

        value = getattr(api, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'dlscope' has no attribute {name!r}")
