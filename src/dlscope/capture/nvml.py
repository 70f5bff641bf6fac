"""The hardware-counter collector: NVML (and GPM on Hopper and newer) sampled for every GPU the
program can see, on by default when a GPU is visible.

Where the sampler runs: under ``dlscope profile`` the session that owns this collector is the
dlscope parent, already a separate process, so the sampler is a thread there. Under the
in-process API (``with dlscope.profile(...)``) it is a helper process
(``python -m dlscope.capture.nvml_sampler``) so it never holds the program's GIL; it writes its
own spool file named after the session's pid and stops when told or when the program dies.
Samples are flushed about once a second, so a killed run keeps them. At finalize they become the
``counters`` table (metric names and units in ``store.schema.METRICS``), and the GPUs'
descriptions go to ``meta.json`` ``devices``.

Settings: ``nvml`` ('auto' | 'on' | 'off'), ``sample_interval_ms`` (50), ``gpm_interval_ms`` (200
when None; never less than 100), ``nvml_module`` (an NVML module with pynvml's names; tests pass a
fake).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import CollectorUnavailable
from . import counter_spool, nvml_api
from .base import Collector, DecodeContext, Settings
from .nvml_sampler import DEFAULT_GPM_INTERVAL_MS, MIN_GPM_INTERVAL_MS, Sampler, close_sampler, open_sampler

if TYPE_CHECKING:
    import pyarrow as pa

    from .session import Session

STOP_TIMEOUT_S = 5.0


class NvmlCollector(Collector):
    name: ClassVar[str] = "nvml"
    layers: ClassVar[tuple[str, ...]] = ("hardware",)
    setting: ClassVar[str] = "nvml"
    scope: ClassVar[str] = "host"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.interval_ms = float(settings.sample_interval_ms or 50)
        self.gpm_interval_ms = max(float(settings.gpm_interval_ms or DEFAULT_GPM_INTERVAL_MS), MIN_GPM_INTERVAL_MS)
        self.module = settings.nvml_module
        self.mode = ""
        self._spool_dir = Path()
        self._pid = 0
        self._sampler: Sampler | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._cpu_s = 0.0
        self._wall_s = 0.0

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self, session: Session) -> None:
        self._spool_dir, self._pid = session.spool_dir, session.pid
        if session.owner == "api":
            self._start_process()
        else:
            self._start_thread()

    def _start_thread(self) -> None:
        self.mode = "thread"
        self._sampler = open_sampler(
            self._spool_dir,
            self._pid,
            nvml_module=self.module,
            interval_ms=self.interval_ms,
            gpm_interval_ms=self.gpm_interval_ms,
        )
        self._thread = threading.Thread(target=self._run_thread, name="dlscope-nvml", daemon=True)
        self._thread.start()

    def _run_thread(self) -> None:
        assert self._sampler is not None
        wall0, cpu0 = time.monotonic(), time.thread_time()
        try:
            self._sampler.run(self._stop)
        finally:
            self._cpu_s, self._wall_s = time.thread_time() - cpu0, time.monotonic() - wall0

    def _start_process(self) -> None:
        self.mode = "process"
        if self.module == "pynvml":  # cheap checks first: no helper process on a machine without GPUs
            reason = nvml_api.precheck()
            if reason:
                raise CollectorUnavailable(reason)
            if importlib.util.find_spec("pynvml") is None:
                raise CollectorUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        env = dict(os.environ)
        env.pop("DLSCOPE_SESSION", None)  # the helper is not a program to profile
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)  # the same dlscope and NVML
        cmd = [
            sys.executable,
            "-m",
            "dlscope.capture.nvml_sampler",
            "--spool-dir",
            str(self._spool_dir),
            "--pid",
            str(self._pid),
            "--interval-ms",
            str(self.interval_ms),
            "--gpm-interval-ms",
            str(self.gpm_interval_ms),
            "--flush-s",
            str(self.settings.flush_interval_s),
            "--nvml-module",
            self.module,
        ]
        log = open(self._spool_dir / f"{self._pid}.nvml.log", "wb")  # noqa: SIM115 - the helper's stderr
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                close_fds=True,
                start_new_session=True,
            )
        except OSError as e:
            raise CollectorUnavailable(f"cannot start the sampler process: {e}") from None
        finally:
            log.close()

    def flush(self) -> None:
        if self._sampler is not None:
            self._sampler.writer.flush()

    def stop(self) -> None:
        if self._thread is not None and self._sampler is not None:
            self._stop.set()
            self._thread.join(timeout=STOP_TIMEOUT_S)
            close_sampler(self._spool_dir, self._pid, self._sampler, self._cpu_s, self._wall_s)
            self._thread = None
        if self._proc is not None:
            _stop_process(self._proc)
            self._proc = None

    # ---- what meta.json says --------------------------------------------------------------------
    def _header(self) -> dict[str, Any]:
        return read_header(self._spool_dir, self._pid) or {}

    def describe(self) -> dict[str, Any]:
        h = self._header()
        out: dict[str, Any] = {
            "mode": self.mode,
            "interval_ms": self.interval_ms,
            "gpm_interval_ms": self.gpm_interval_ms,
        }
        if h.get("status") == "ok":
            out["devices"] = [d.get("name", "?") for d in h.get("devices", [])]
            out["samples"] = h.get("samples", 0)
            out["unavailable"] = h.get("unavailable", {})
            if h.get("wall_s"):
                out["sampler_cpu_s"] = h.get("cpu_s")
                out["sampler_cpu_pct_of_core"] = 100.0 * float(h.get("cpu_s") or 0) / float(h["wall_s"])
                if h.get("cpu_total_s") is not None:
                    out["sampler_process_cpu_s"] = h["cpu_total_s"]
        return out

    def outcome(self) -> tuple[str, str] | None:
        if self.mode != "process":
            return None
        h = self._header()
        if not h:
            log = self._spool_dir / f"{self._pid}.nvml.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            return "failed", "the sampler process wrote nothing" + (f": {tail[0]}" if tail else "")
        if h.get("status") != "ok":
            return str(h.get("status", "failed")), str(h.get("reason", ""))
        return None

    # ---- finalize -------------------------------------------------------------------------------
    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        import pyarrow as pa

        header = read_header(spool_dir, pid)
        path = counter_spool.spool_path(spool_dir, pid)
        if header is None or not path.exists():
            return {}
        for d in header.get("devices", []):
            if d not in context.devices:
                context.devices.append(d)
        context.notes += [f"nvml: {n}" for n in header.get("notes", [])]
        t, code, value, torn = counter_spool.read_samples(path)
        if torn:
            context.notes.append(f"process {pid}: the counter spool ended inside a write; the last sample was dropped")
        if not len(t):
            return {}
        import numpy as np

        metrics = list(header.get("metrics", []))
        idx = code % counter_spool.MAX_METRICS
        known = idx < len(metrics)
        names = np.array(metrics + ["<unknown>"], dtype=object)[np.where(known, idx, len(metrics))]
        return {
            "counters": pa.table(
                {
                    "rank": pa.array(np.full(len(t), context.rank, np.int32)),
                    "device": pa.array((code // counter_spool.MAX_METRICS).astype(np.int32)),
                    "ts_ns": pa.array(t + context.offset_ns),
                    "metric": pa.array(names.tolist(), pa.string()),
                    "value": pa.array(value),
                }
            )
        }


def read_header(spool_dir: Path, pid: int) -> dict[str, Any] | None:
    try:
        h = json.loads(counter_spool.header_path(spool_dir, pid).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return h if isinstance(h, dict) else None


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    """Ask the helper to stop (it flushes and writes its final header), then make sure it did."""
    try:
        if proc.stdin is not None:
            proc.stdin.write(b"stop\n")
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
