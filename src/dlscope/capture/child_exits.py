"""How each rank of a job ended, as its launcher saw it.

A rank killed by SIGKILL writes nothing; the ``dlscope profile`` parent sees only the launcher's
exit code. The launcher (torchrun's elastic agent) is the process that waits for the ranks, so
the bootstrap, which records nothing there (:mod:`.distributed`), installs this instead: when
``subprocess.Popen`` learns a child's exit status, ``spool/PID.exit.json`` says it (the return
code, negative for a signal, and when it was seen). Finalize reads it for the ranks that
recorded; a child that was not a rank is ignored. torchrun polls its workers every
``--monitor-interval`` (0.1 s by default): the time is when it noticed, that much after the death
at most.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from ..store import spool

EXIT_SUFFIX = "exit.json"


def exit_status(rc: int) -> int:
    """The shell's convention: a program killed by signal N exits 128 + N (``rc``: Popen's return
    code, negative for a signal)."""
    return 128 - rc if rc < 0 else rc


def _record(spool_dir: Path, pid: int, returncode: int) -> None:
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
        spool.write_json_atomic(
            spool_dir / f"{pid}.{EXIT_SUFFIX}",
            {"pid": pid, "returncode": returncode, "end_ns": time.time_ns()},
            durable=False,
        )
    except (OSError, TypeError, ValueError):
        pass  # the launcher's own work goes on whatever happens here


def watch(profile_dir: str | Path) -> None:
    """Record the exit of every child this process's ``subprocess.Popen`` objects reap
    (torchrun's workers)."""
    import subprocess  # here: every recorded process imports this module, only launchers need it

    spool_dir = Path(profile_dir) / "spool"
    original = subprocess.Popen._handle_exitstatus  # type: ignore[attr-defined]  # private, in CPython since 3.3
    if getattr(original, "_dlscope_wrapped", False):
        return

    def _handle_exitstatus(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _record(spool_dir, self.pid, self.returncode)

    _handle_exitstatus._dlscope_wrapped = True  # type: ignore[attr-defined]  # marker on the wrapping function
    subprocess.Popen._handle_exitstatus = _handle_exitstatus  # type: ignore[attr-defined]  # (see above)


def watch_multiprocessing(profile_dir: str | Path) -> None:
    """The same for the children of ``multiprocessing`` (``torch.multiprocessing.spawn``'s ranks,
    whose parent is a recorded process, not a launcher): their exit is learnt in ``poll``, once
    ``multiprocessing.popen_fork`` is imported (its subclasses for spawn and forkserver inherit it)."""
    from .import_hooks import when_imported

    spool_dir = Path(profile_dir) / "spool"

    def patch(module: ModuleType) -> None:
        popen = module.Popen
        original = popen.poll
        if getattr(original, "_dlscope_wrapped", False):
            return

        def poll(self: Any, *args: Any, **kwargs: Any) -> int | None:
            known = self.returncode
            rc: int | None = original(self, *args, **kwargs)
            if known is None and self.returncode is not None:
                _record(spool_dir, self.pid, self.returncode)
            return rc

        poll._dlscope_wrapped = True  # type: ignore[attr-defined]  # marker on the wrapping function
        popen.poll = poll

    when_imported("multiprocessing.popen_fork", patch)


def read_exit(spool_dir: Path, pid: int) -> tuple[int, int] | None:
    """(return code, epoch ns when it was seen) of ``pid`` as its launcher recorded it, else None."""
    import json

    try:
        d = json.loads((spool_dir / f"{pid}.{EXIT_SUFFIX}").read_text(encoding="utf-8"))
        rc, end = d["returncode"], d["end_ns"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not (isinstance(rc, int) and isinstance(end, int)) or isinstance(rc, bool):
        return None
    return rc, end
