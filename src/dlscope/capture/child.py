"""Start recording inside a process launched by `dlscope profile` (called by the injected
sitecustomize before the program's own code runs)."""

from __future__ import annotations

import json

from .. import api
from .base import Settings
from .session import Session


def start_from_env(cfg_text: str) -> None:
    cfg = json.loads(cfg_text)
    session = Session(cfg["profile_dir"], Settings.from_dict(cfg.get("settings") or {}), owner="cli")
    session.start()
    handle = api.Profile(session, owns=False)
    api._current = handle
