"""Start recording inside a process launched by `dlscope profile` (called by the injected
sitecustomize before the program's own code runs). Launchers record nothing; children that
multiprocessing spawned record once they join a process group (see :mod:`.distributed`)."""

from __future__ import annotations

import json
from typing import Any

from . import distributed, handle, turn
from .base import Settings
from .session import Session


def start_from_env(cfg_text: str) -> None:
    cfg = json.loads(cfg_text)
    argv = distributed.command_line()
    if distributed.is_launcher(argv):
        from .child_exits import watch

        watch(cfg["profile_dir"])  # it records nothing, but says how each rank ended
        # a launcher started ahead (dlscope try does not start one so): no rank before its turn
        turn.wait_for_turn()
        return
    from .child_exits import watch_multiprocessing

    watch_multiprocessing(cfg["profile_dir"])  # the ranks torch.multiprocessing.spawn starts
    if distributed.is_spawned_child(argv):
        distributed.on_process_group(lambda rank, world: _start(cfg, (rank, world)))
        return
    _start(cfg)
    # dlscope try's next run, started ahead: waits here, recording, until the GPU is its own
    turn.wait_for_turn()


def _start(cfg: dict[str, Any], rank: tuple[int, int] | None = None) -> None:
    if handle._current is not None:
        return
    session = Session(cfg["profile_dir"], Settings.from_dict(cfg.get("settings") or {}), owner="cli")
    if rank is not None:
        session.rank, session.world_size = rank
        session.rank_source = "torch.distributed"
    session.start()
    handle._current = handle.Profile(session, owns=False)
