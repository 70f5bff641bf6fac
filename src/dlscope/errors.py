"""Typed errors. Each carries the exit code the command line returns for it.

Exit codes: 0 success; 2 bad input or usage (a missing, truncated, corrupt or foreign file, a bad
flag); 1 only for a dlscope bug. ``dlscope profile`` passes the profiled program's own exit code
through.
"""

from __future__ import annotations


class DlscopeError(Exception):
    """An error with a one-line message meant for the user."""

    exit_code = 2


class UsageError(DlscopeError):
    """Bad flags or arguments."""


class InputError(DlscopeError):
    """A file that is missing, unreadable, truncated, corrupt or not what it claims to be."""


class ProfileFormatError(InputError):
    """A profile directory that is not a dlscope profile, or one written by a newer dlscope."""


class NoStepsError(DlscopeError):
    """A report needs iterations but none were found."""


class CollectorUnavailable(Exception):
    """Raised by a collector's start() when its layer cannot be recorded here; the message says
    why and ends up in meta.json. Never reaches the user as an error."""
