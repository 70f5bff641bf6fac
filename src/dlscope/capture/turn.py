"""A run started ahead of its turn: ``dlscope try`` starts a GPU's next run while the last one still
runs, and lets it go on when that one has ended.

Most of a run's start-up is its own: on an H200 host the BERT-like program of issue 38 spent 7.3 s
from its start to its first step (about 3 s of it importing torch) against 2.6 s of measured steps
(bench/RESULTS.md, 2026-11-28). A process started ahead imports the frameworks its program will
import (:data:`PREIMPORTED`, those the first run recorded: importing them is the same work the
program does first, done earlier, under dlscope's hooks as the program's own import would be), then
waits on a pipe. Nothing touches the GPU until it is let go, so the run that still measures its
steps on that GPU shares it with nobody; the one thing the two share is the host, for the import's
seconds on one of the GPU's CPUs.

Only the process dlscope started waits (its parent is dlscope), and the variable is taken out of
its environment, so that its own children (DataLoader workers, spawned ranks) never do. The pipe
closed without a word (the run was called off, or dlscope ended): the process exits at once,
having run nothing of the program."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from pathlib import Path

ENV = "DLSCOPE_TURN"
GO = b"g"
# a run's mark in its profile folder once its measured steps are done (it ends then): the GPU's next
# run may go on while it tears down (its CUDA context, its writes), which takes about 0.9 s on the
# H200 host against 4 s or more before the next run's first step (bench/RESULTS.md, 2026-11-28)
MEASURED = "measured"
# the frameworks whose import makes up most of a deep-learning program's start-up, as named in a
# profile's meta.frameworks: a run started ahead imports those its first run recorded
PREIMPORTED = ("torch", "jax", "tensorflow")


def turn_env(read_fd: int, preimport: tuple[str, ...]) -> str:
    """The value of :data:`ENV` for a child that waits on ``read_fd`` (ours: its parent's pid)."""
    return json.dumps({"fd": read_fd, "parent": os.getpid(), "preimport": list(preimport)})


def mark_measured(profile_dir: Path) -> None:
    """In the run, as its measured steps are done: say so to dlscope try (a file, :data:`MEASURED`)."""
    with contextlib.suppress(OSError):  # no mark: its next run waits for its exit, as before
        (profile_dir / MEASURED).touch()


def wait_for_turn() -> None:
    """In the started process, before its program runs: import ahead, then wait to be let go."""
    spec = os.environ.pop(ENV, None)
    if not spec:
        return
    cfg = json.loads(spec)
    if os.getppid() != cfg.get("parent"):
        return  # a process the program started: not the one dlscope holds
    for name in cfg.get("preimport") or []:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the program's own import will say what is wrong
            pass
    fd = int(cfg["fd"])
    try:
        word = os.read(fd, 1)
    except OSError:
        word = b""
    finally:
        os.close(fd)
    if word != GO:
        os._exit(0)  # called off before its turn: nothing of the program ran
