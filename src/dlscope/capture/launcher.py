"""Run a command under the profiler (`dlscope profile -- CMD ...`).

The dlscope process is the parent: it prepares the spool, starts the program with the bootstrap
on PYTHONPATH (so every Python process of the command records itself), records the program's
whole run as a phase, runs host-level collectors (the NVML sampler) outside the program so they
never hold its GIL, waits, and finalizes, even when the program crashed or was killed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from ..errors import UsageError
from .base import Settings
from .session import Session

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


def command_after_dashes(words: list[str]) -> list[str]:
    """The command of ``dlscope profile|try [options] -- CMD ...`` (argparse keeps the ``--``),
    normalized (:func:`normalize_command`)."""
    return normalize_command(words[1:] if words and words[0] == "--" else list(words))


def normalize_command(cmd: list[str]) -> list[str]:
    """`dlscope profile -- train.py` runs the script with this interpreter."""
    if not cmd:
        raise UsageError("no command to profile: dlscope profile [options] -- CMD [ARGS...]")
    if cmd[0].endswith(".py") and Path(cmd[0]).is_file():
        return [sys.executable, *cmd]
    return list(cmd)


def child_env(profile_dir: Path, settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")) if p)
    env["DLSCOPE_SESSION"] = json.dumps({"profile_dir": str(profile_dir.resolve()), "settings": settings.to_dict()})
    env["DLSCOPE_PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def _interactive() -> bool:
    """True when Ctrl-C reaches the program directly (same foreground process group)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def run_profiled(cmd: list[str], profile_dir: Path, settings: Settings, stdout: TextIO | None = None) -> int:
    """Run ``cmd`` to completion under the profiler; returns its raw return code (negative:
    killed by that signal). The caller finalizes. ``stdout``: where the program's standard output
    goes (default: ours)."""
    from . import COLLECTORS

    host_collectors = [c for c in COLLECTORS if c.scope == "host"]
    parent = Session(profile_dir, settings, owner="cli-parent", collectors=host_collectors)
    parent.start()
    handle = parent.recorder.thread_ranges()
    run_range = handle[shlex.join(cmd)[:200]]
    live = None
    if settings.extra.get("live"):
        from .live_view import LiveView

        live = LiveView(profile_dir / "spool").start()
    try:
        run_range.__enter__()
        try:
            proc = subprocess.Popen(cmd, env=child_env(profile_dir, settings), stdout=stdout)
        except OSError as e:
            raise UsageError(f"cannot run {cmd[0]!r}: {e.strerror or e}") from None
        forwarded = {signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
        interactive = _interactive()

        def forward(signum: int, frame: object) -> None:
            if signum == signal.SIGINT and interactive:
                return  # the terminal already delivered it to the program
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                pass

        old = {s: signal.signal(s, forward) for s in (*forwarded, signal.SIGINT)}
        try:
            while True:
                try:
                    rc = proc.wait()
                    break
                except KeyboardInterrupt:  # pragma: no cover - SIGINT is handled above
                    continue
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        run_range.__exit__(None, None, None)
    finally:
        if live is not None:
            live.stop()
        parent.stop("exit")
    return rc


def exit_status(rc: int) -> int:
    """The shell's convention: a program killed by signal N exits 128 + N."""
    return 128 - rc if rc < 0 else rc
