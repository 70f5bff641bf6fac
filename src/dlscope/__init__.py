"""dlscope: profile a Python deep-learning program through every layer of its stack.

See :mod:`dlscope.api` for the recording API and ``dlscope --help`` for the command line.
"""

__version__ = "0.1.0"

from .api import Profile, begin, current, end, mark, phase, profile, step  # noqa: E402

__all__ = ["Profile", "__version__", "begin", "current", "end", "mark", "phase", "profile", "step"]
