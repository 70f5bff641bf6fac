"""Which process of a distributed job is which: launchers, ranks, and the rank of a process.

``dlscope profile -- torchrun ...`` starts every Python process of the job with the bootstrap.
Each rank records itself into the shared spool and finalize merges them, so the profile holds
every rank on one clock (the Unix-epoch clock each session measures its offset to). Three kinds
of process take part:

* launchers (torchrun's elastic agent, ``python -m torch.distributed.run``, ``accelerate
  launch``, DeepSpeed's runner) start the ranks and wait: they record nothing, the ``dlscope
  profile`` parent already times the whole command;
* ranks started with ``RANK`` in their environment (torchrun sets it, and so do Open MPI,
  PMI and Slurm launchers under their own names) know their rank from the start;
* ranks that learn it later (``torch.multiprocessing.spawn`` passes the rank as an argument):
  a spawned child starts recording when it calls ``init_process_group``, with the rank the
  process group gives it, so DataLoader workers started the same way never record.

A process that reads no rank anywhere is rank 0 (a plain single-process program).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
# console scripts and modules that launch ranks and then only wait for them
LAUNCHER_SCRIPTS = ("torchrun", "accelerate", "deepspeed")
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher.runner",
)
SPAWNED_FLAG = "--multiprocessing-fork"  # multiprocessing's spawn/forkserver children


def _env_int(names: tuple[str, ...]) -> int | None:
    for var in names:
        v = os.environ.get(var, "").strip()
        if v.lstrip("-").isdigit():
            return int(v)
    return None


def env_rank() -> int | None:
    return _env_int(RANK_VARS)


def env_world_size() -> int | None:
    return _env_int(WORLD_VARS)


def env_local_rank() -> int | None:
    return _env_int(LOCAL_RANK_VARS)


def command_line() -> list[str]:
    """The interpreter's own command line (``sys.orig_argv``: ``sys.argv`` is not final yet
    when site runs, and says '-m' instead of the module)."""
    return list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])


def is_launcher(argv: list[str]) -> bool:
    """True for a launcher process: ``[python] .../torchrun ...``, ``python -m torch.distributed.run``."""
    args = argv[1:]
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        args = args[1:]  # interpreter flags (-u, -X ..., -W ...)
    if not args:
        return False
    if args[0] == "-m":
        return len(args) > 1 and args[1] in LAUNCHER_MODULES
    if args[0] == "-c":
        return False
    return os.path.basename(args[0]) in LAUNCHER_SCRIPTS


def is_spawned_child(argv: list[str]) -> bool:
    return SPAWNED_FLAG in argv


def torch_rank() -> tuple[int, int] | None:
    """(rank, world size) from an initialized torch.distributed process group, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a half-initialized backend: keep what we have
        return None
    return None


def on_process_group(callback: Callable[[int, int], None]) -> None:
    """Call ``callback(rank, world_size)`` right after the program's ``init_process_group``
    returns (wrapping it when torch.distributed is imported)."""
    from .import_hooks import when_imported

    def patch(dist: ModuleType) -> None:
        original = getattr(dist, "init_process_group", None)
        if original is None or getattr(original, "_dlscope_wrapped", False):
            return

        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            got = torch_rank()
            if got is not None:
                try:
                    callback(*got)
                except Exception as e:  # profiling must never break the program
                    sys.stderr.write(f"dlscope: not profiling process {os.getpid()}: {e}\n")
            return out

        init_process_group._dlscope_wrapped = True  # type: ignore[attr-defined]  # markers on the wrapping function
        init_process_group.__wrapped__ = original  # type: ignore[attr-defined]  # (see above)
        init_process_group.__doc__ = original.__doc__
        # torch.distributed defines it only where the backend is built in (is_available())
        dist.init_process_group = init_process_group  # type: ignore[attr-defined]  # (see above)
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is not None and getattr(c10d, "init_process_group", None) is original:
            c10d.init_process_group = init_process_group  # type: ignore[attr-defined]  # (see above)

    when_imported("torch.distributed", patch)
