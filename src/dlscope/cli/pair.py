"""Opening either side of a comparison: a profile, or a trace file dlscope can import.

``dlscope diff`` and ``dlscope check`` accept what ``dlscope import`` reads (a Kineto trace, an
nsys SQLite export, a trace folder) as well as profiles: a trace is imported into a temporary
profile that lives as long as the command, so comparing two traces needs no extra step. The
opener itself lives in :mod:`dlscope.opening` (the Python API uses it too).
"""

from __future__ import annotations

from ..opening import is_profile, open_any

__all__ = ["is_profile", "open_any"]
