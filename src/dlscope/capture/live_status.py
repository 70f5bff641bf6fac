"""What the running program is doing, written about once a second for `dlscope profile`'s live
line (:mod:`.live_view`): the step it is in, the last and median step times, the phase it is in.

A collector inside each profiled process, on only when the parent shows the line (``Settings.live``).
Per step it appends one clock reading to a bounded deque; the file is written by the
session's flusher thread, so the program's own thread does no I/O for it.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store import spool
from .base import Collector, Settings
from .schedule import Action
from .torch_hooks import HOOK_PREFIX

if TYPE_CHECKING:
    from .session import Session

KEEP_STEPS = 64  # boundaries kept for the median


class LiveStatus(Collector):
    name = "live"
    layers = ()
    scope = "process"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.session: Session | None = None
        self.bounds: deque[int] = deque(maxlen=KEEP_STEPS)
        self.step = 0
        self.main_tid = threading.get_native_id()
        self.phase: str | None = None
        self._last: dict[int, tuple[str, int]] = {}  # range -> (name, its last event: +enter / -exit)

    def wanted(self) -> bool:
        return self.settings.live

    def off_reason(self) -> str:
        # off by default (no terminal, or a program not run by `dlscope profile`) unless --quiet
        return "turned off by the user (--quiet)" if self.settings.quiet else super().off_reason()

    def start(self, session: Session) -> None:
        self.session = session

    def on_step(self, step: int, action: Action) -> None:
        self.step = step
        self.bounds.append(time.perf_counter_ns())

    def before_flush(self) -> None:
        if self.session is not None:
            self.phase = self._open_phase()

    def flush(self) -> None:
        if self.session is None:
            return
        b = list(self.bounds)
        durations = [(y - x) / 1e6 for x, y in zip(b, b[1:])]
        status: dict[str, Any] = {
            "rank": self.session.rank,
            "step": self.step,
            "phase": self.phase,
            "last_ms": durations[-1] if durations else None,
            "median_ms": statistics.median(durations) if durations else None,
            "written_ns": time.time_ns(),
        }
        spool.write_json_atomic(Path(self.session.spool_dir) / f"{self.session.pid}.live.json", status, durable=False)

    def _open_phase(self) -> str | None:
        """The innermost phase open on the program's main thread: the range whose last event was
        the latest enter. Events are drained at each flush, so each range's last state is kept
        here across flushes."""
        assert self.session is not None
        for rng in list(self.session.recorder._ranges):
            ev = rng.events
            if rng.tid == self.main_tid and ev:
                self._last[id(rng)] = (rng.name, ev[-1])
        open_now = [(t, name) for name, t in self._last.values() if t > 0]
        if not open_now:
            return None
        name = max(open_now)[1]
        return name[len(HOOK_PREFIX) :] if name.startswith(HOOK_PREFIX) else name
