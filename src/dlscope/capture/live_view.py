"""`dlscope profile`'s live line: while the program runs, one status line on the terminal,
refreshed about once a second: the step, the last and median step time, the phase the program is
in, and each GPU's utilization and memory (seed 003's `nvidia-smi dmon`, tied to steps).

Shown only when stderr is a terminal (never in a log or a pipe), from a thread of the dlscope
parent: it reads the ``PID.live.json`` files the program's processes write (:mod:`.live_status`)
and asks NVML for the GPUs' state. The line is cleared when the program ends.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import IO, Any

REFRESH_S = 1.0


class LiveView:
    def __init__(self, spool_dir: Path, stream: IO[str] | None = None) -> None:
        self.spool_dir = spool_dir
        self.stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handles: list[Any] = []
        self.lines = 0

    @staticmethod
    def wanted(stream: IO[str] | None = None) -> bool:
        s = stream or sys.stderr
        return bool(getattr(s, "isatty", lambda: False)())

    def start(self) -> LiveView:
        self._open_nvml()
        self._thread = threading.Thread(target=self._loop, name="dlscope-live", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self.lines:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            text = self.line()
            if text:
                self.stream.write("\r\x1b[K" + text)
                self.stream.flush()
                self.lines += 1

    def line(self) -> str:
        """The status line now (empty before the program wrote any status)."""
        status = []
        for f in sorted(self.spool_dir.glob("*.live.json")):
            try:
                status.append(json.loads(f.read_text()))
            except (OSError, ValueError):
                continue
        if not status:
            return ""
        first = min(status, key=lambda s: s.get("rank", 0))  # rank 0 speaks for a job
        parts = [f"step {first.get('step', 0)}"]
        if first.get("last_ms") is not None:
            parts.append(f"last {first['last_ms']:.1f} ms")
        if first.get("median_ms") is not None:
            parts.append(f"median {first['median_ms']:.1f} ms")
        if first.get("phase"):
            parts.append(f"in {first['phase']}")
        if len(status) > 1:
            parts.append(f"{len(status)} ranks")
        parts += self._gpus()
        return "dlscope: " + " | ".join(parts)

    def _open_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: the line goes without GPUs
            self._nvml, self._handles = None, []

    def _gpus(self) -> list[str]:
        out = []
        for i, h in enumerate(self._handles):
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                out.append(f"GPU{i} {util}% {mem.used / 2**30:.1f}/{mem.total / 2**30:.0f} GiB")
            except Exception:  # noqa: BLE001
                continue
        return out
