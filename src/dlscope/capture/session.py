"""A recording in one process: the spool, the app recorder, the collectors and the flusher.

Safety is the point of this module. The flusher writes the spool about once a second, so a
process killed with SIGKILL loses at most that much. SIGTERM (when the program has not claimed
it), exceptions, KeyboardInterrupt and normal exit all stop the session through the same path,
which flushes everything and writes ``PID.end.json``; then the signal is re-raised so the
program dies exactly as it would have. A forked child (a DataLoader worker) stops recording.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CollectorUnavailable
from ..store import spool
from ..store.meta import CollectorStatus
from ..vocabulary.version import __version__
from . import distributed
from .app import AppRecorder
from .base import Collector, Settings
from .clock import measure_offset
from .schedule import Action, StepSchedule

_active_sessions: list[Session] = []


def _after_fork_in_child() -> None:
    # Threads do not survive fork and the spool files belong to the parent: the child records
    # nothing. (DataLoader workers are forked; their time shows as the parent's data wait.)
    for s in _active_sessions:
        s._forked()
    _active_sessions.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Session:
    """One process's recording into ``profile_dir/spool``."""

    def __init__(
        self,
        profile_dir: str | Path,
        settings: Settings | None = None,
        owner: str = "api",
        collectors: list[type[Collector]] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        wall_clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.profile_dir = Path(profile_dir)
        self.spool_dir = self.profile_dir / "spool"
        self.settings = settings or Settings()
        self.owner = owner  # 'api': this process finalizes; 'cli': the dlscope parent does
        self.schedule = StepSchedule.from_options(self.settings.steps, self.settings.warmup)
        self.clock = clock
        self.wall_clock = wall_clock
        self.recorder = AppRecorder(clock)
        self.pid = os.getpid()
        env_rank = distributed.env_rank()
        self.rank = env_rank if env_rank is not None else 0
        self.rank_source = "env" if env_rank is not None else "default"  # or 'torch.distributed'
        self.world_size = distributed.env_world_size()
        self.started = False
        self.stopped = False
        self.stop_reason = ""
        if collectors is None:
            from . import COLLECTORS

            # Host-level collectors (the NVML sampler) run in the `dlscope profile` parent when
            # there is one, so that each GPU is sampled once, outside the program.
            collectors = [c for c in COLLECTORS if owner == "api" or c.scope == "process"]
        self._collector_types = collectors
        self.collectors: list[Collector] = []
        self.statuses: dict[str, CollectorStatus] = {}
        self._flush_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._flusher: threading.Thread | None = None
        self._events: spool.EventSpoolWriter | None = None
        self._strings: spool.StringSpoolWriter | None = None
        self._ledger: spool.StepLedgerWriter | None = None
        self._prev_sigterm: Any = None
        self.cupti_owner: str | None = None
        self._cupti_lock = threading.Lock()

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Session:
        if self.started:
            return self
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.offset = measure_offset(clock=self.clock, wall_clock=self.wall_clock)
        self.start_ns = self.offset.to_epoch(self.clock())
        self._events = spool.EventSpoolWriter(self.spool_dir / f"{self.pid}.events.spool")
        self._strings = spool.StringSpoolWriter(self.spool_dir / f"{self.pid}.strings.jsonl")
        if self.owner != "cli-parent":  # the parent marks no steps
            self._ledger = spool.StepLedgerWriter(self.spool_dir / f"{self.pid}.steps.spool")
            self.recorder.on_step = self._ledger.write
        spool.write_json_atomic(self.spool_dir / f"{self.pid}.session.json", self._session_info())
        self.recorder.set_recording(self.owner == "cli-parent" or self.schedule.action(0) is not Action.SKIP)
        self.started = True
        _active_sessions.append(self)
        for cls in self._collector_types:
            self._start_collector(cls)
        self._flusher = threading.Thread(target=self._flush_loop, name="dlscope-flusher", daemon=True)
        self._flusher.start()
        atexit.register(self._atexit)
        self._install_sigterm()
        return self

    def _start_collector(self, cls: type[Collector]) -> None:
        c = cls(self.settings)
        if not c.wanted():
            self.statuses[c.name] = CollectorStatus("off", c.off_reason())
            return
        try:
            c.start(self)
        except CollectorUnavailable as e:
            self.statuses[c.name] = CollectorStatus("unavailable", str(e))
            return
        except Exception as e:  # a collector must never break the program it profiles
            self.statuses[c.name] = CollectorStatus("failed", f"{e.__class__.__name__}: {e}")
            return
        self.collectors.append(c)
        self.statuses[c.name] = CollectorStatus("ok", "", c.describe())

    def step(self, source: int = spool.STEP_EXPLICIT) -> int:
        """Mark a step boundary; returns the index of the step that begins."""
        if not self.started or self.stopped:
            return self.recorder.step_count
        if self.rank_source == "default":
            self._discover_rank()
        idx = self.recorder.step_boundary(source)
        if idx is None:
            return self.recorder.step_count
        action = self.schedule.action(idx)
        want = action is not Action.SKIP
        if want != self.recorder.recording:
            self.recorder.set_recording(want)
        for c in self.collectors:
            try:
                c.on_step(idx, action)
            except Exception as e:
                self._collector_failed(c, e)
        return idx

    def claim_cupti(self, owner: str) -> bool:
        """CUPTI serves one client per process: the first collector to ask gets it."""
        with self._cupti_lock:
            if self.cupti_owner in (None, owner):
                self.cupti_owner = owner
                return True
            return False

    def stop(self, reason: str = "exit") -> None:
        """Stop every collector, flush everything, write PID.end.json. Idempotent."""
        if not self.started or self.stopped:
            return
        if self.rank_source == "default":
            self._discover_rank()
        self.stopped = True
        self.stop_reason = reason
        self.recorder.set_recording(False)
        for c in list(reversed(self.collectors)):
            try:
                c.stop()
            except CollectorUnavailable as e:  # it ran, but its layer could not be recorded
                self.statuses[c.name] = CollectorStatus("unavailable", str(e), c.describe())
            except Exception as e:
                self._collector_failed(c, e)
        self._stop_event.set()
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=10)
        self.flush()
        for c in self.collectors:
            st = self.statuses.get(c.name)
            if st is not None and st.status == "ok":
                st.settings = c.describe()
                changed = c.outcome()
                if changed is not None:
                    st.status, st.reason = changed
        end = {
            "pid": self.pid,
            "end_ns": self.offset.to_epoch(self.clock()),
            "reason": reason,
            "steps": self.recorder.step_count,
            "settings": self.settings.to_dict(),
            "collectors": {k: v.__dict__ for k, v in self.statuses.items()},
            "dropped": {c.name: c.dropped() for c in self.collectors if c.dropped()},
            "frameworks": _framework_versions(),
        }
        spool.write_json_atomic(self.spool_dir / f"{self.pid}.end.json", end)
        for w in (self._events, self._strings, self._ledger):
            if w is not None:
                w.close()
        self.recorder.on_step = None
        if self in _active_sessions:
            _active_sessions.remove(self)
        self._restore_sigterm()

    def flush(self) -> None:
        with self._flush_lock:
            if self._events is None or self._strings is None or self._events._f.closed:
                return
            for c in self.collectors:  # what must see the ranges' events before they are drained
                c.before_flush()
            blocks, names = self.recorder.drain()
            self._strings.write(names)  # names first: a block never refers to an unwritten name
            self._events.write_blocks(blocks)
            for c in self.collectors:
                try:
                    c.flush()
                except Exception as e:
                    self._collector_failed(c, e)

    def release_cupti(self, owner: str) -> None:
        """Give CUPTI back when ``owner`` stops using it (only the holder can)."""
        with self._cupti_lock:
            if self.cupti_owner == owner:
                self.cupti_owner = None

    # ---- internals ---------------------------------------------------------------------------
    def _discover_rank(self) -> None:
        """A process started without a rank in its environment takes the rank of its
        torch.distributed process group once there is one (checked at step boundaries: a
        dictionary look-up while torch.distributed is not initialized)."""
        got = distributed.torch_rank()
        if got is None:
            return
        self.rank, self.world_size = got
        self.rank_source = "torch.distributed"
        if self._events is not None:
            spool.write_json_atomic(self.spool_dir / f"{self.pid}.session.json", self._session_info())

    def _flush_loop(self) -> None:
        while not self._stop_event.wait(self.settings.flush_interval_s):
            try:
                self.flush()
            except OSError:
                return  # disk full or spool removed: keep the program running

    def _collector_failed(self, c: Collector, e: BaseException) -> None:
        self.statuses[c.name] = CollectorStatus("failed", f"{e.__class__.__name__}: {e}")
        if c in self.collectors:
            self.collectors.remove(c)

    def _session_info(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "rank": self.rank,
            "rank_source": self.rank_source,
            "world_size": self.world_size,
            "local_rank": distributed.env_local_rank(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "host": socket.gethostname(),
            "owner": self.owner,
            "start_ns": self.start_ns,
            "clock": self.offset.as_dict(),
            "settings": self.settings.to_dict(),
            "schedule": {"start": self.schedule.start, "stop": self.schedule.stop, "warmup": self.schedule.warmup},
            "argv": list(sys.argv),
            "python": sys.version.split()[0],
            "dlscope": __version__,
        }

    def _atexit(self) -> None:
        if not self.stopped:
            self.stop("exit")

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            current = signal.getsignal(signal.SIGTERM)
        except (ValueError, OSError):
            return
        if current not in (signal.SIG_DFL, None):
            return  # the program handles SIGTERM itself; atexit still stops us on its way out
        self._prev_sigterm = current
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _restore_sigterm(self) -> None:
        if self._prev_sigterm is None or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._prev_sigterm)
        except (ValueError, OSError):
            pass
        self._prev_sigterm = None

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.stop("SIGTERM")
        if self.owner == "api":
            try:
                from .finalize import finalize_profile

                finalize_profile(self.profile_dir)
            except Exception:
                pass  # the spool stays; 'dlscope summary' finalizes it later
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _forked(self) -> None:
        self.stopped = True
        self.started = False
        self.collectors = []
        self.recorder.set_recording(False)
        self._events = self._strings = None
        self.recorder.on_step = (
            None  # the parent's ledger is not this process's (its descriptor stays open: the parent's)
        )
        self._ledger = None


def _framework_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for mod in ("torch", "tensorflow", "jax", "cupy"):
        m = sys.modules.get(mod)
        v = getattr(m, "__version__", None) if m is not None else None
        if v:
            out[mod] = str(v)
    return out
