"""The `profile` use case: run a program under the profiler, then finalize what it recorded.

The front doors parse what the user asked (``dlscope profile``'s flags) into :class:`Settings`;
this runs the program and turns its spools into a profile, and says how the program ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..capture.base import Settings


@dataclass(frozen=True)
class ProfiledRun:
    """How a profiled program ended, and whether its profile was finalized."""

    returncode: int  # the launcher's: negative when a signal killed the program
    exit_status: int  # what dlscope exits with: the program's code, 128+N when killed by N
    finalize_error: str | None  # why the profile could not be finalized (the recording is kept)

    @property
    def how(self) -> str:
        return f"exited with {self.exit_status}" if self.returncode >= 0 else f"was killed by signal {-self.returncode}"


def program_command(args: list[str]) -> list[str]:
    """The program to run: the arguments after ``--``."""
    from ..capture.launcher import command_after_dashes

    return command_after_dashes(args)


def step_window(text: str) -> tuple[int | None, int | None]:
    """``A:B`` -> the inclusive step range (a UsageError for anything else)."""
    from ..capture.schedule import parse_steps

    return parse_steps(text)


def live_line_wanted() -> bool:
    """Whether the live status line can show (standard error is a terminal)."""
    from ..capture.live_view import LiveView

    return LiveView.wanted()


def profile_program(cmd: list[str], out: Path, settings: Settings) -> ProfiledRun:
    """Run ``cmd`` under the profiler into ``out`` and finalize the profile."""
    from ..capture.finalize import finalize_profile
    from ..capture.launcher import StderrTail, exit_status, run_end, run_profiled
    from ..errors import DlscopeError

    tail = StderrTail()  # the program's last stderr line, for a run that fails before its first step
    rc = run_profiled(cmd, out, settings, stderr_tail=tail)
    try:
        finalize_profile(out, command=cmd, run_end=run_end(rc, tail))
    except DlscopeError as e:
        return ProfiledRun(rc, exit_status(rc), str(e))
    return ProfiledRun(rc, exit_status(rc), None)
