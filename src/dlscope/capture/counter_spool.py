"""The spool of sampled counters: what the NVML sampler appends while the program runs.

Two files per recording process, named after the *session's* pid (the sampler may run in a
helper process, but its samples belong to the session that started it):

* ``PID.nvml.json``   header, rewritten atomically: metric names, devices, the sampler's
  settings, which metrics are unavailable and why, the sampler's own CPU time.
* ``PID.nvml.spool``  the magic ``DLNVML01`` then fixed 24-byte records ``<q t, q code, d value>``:
  ``t`` is ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, the same in every process of the
  machine, so finalize puts samples on the profile's clock with the session's own offset),
  ``code = device * 256 + metric index``. A write is whole records flushed at once; a torn
  tail is dropped when read.

The writing side uses only the standard library (the sampler may run inside the profiled
process's helper); the reading side uses numpy.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Any

from ..store.spool import write_json_atomic

MAGIC = b"DLNVML01"
RECORD = struct.Struct("<qqd")
MAX_METRICS = 256


def spool_path(spool_dir: Path, pid: int) -> Path:
    return spool_dir / f"{pid}.nvml.spool"


def header_path(spool_dir: Path, pid: int) -> Path:
    return spool_dir / f"{pid}.nvml.json"


class SampleWriter:
    """Buffers samples in memory; ``flush`` appends them to the spool with one write.
    ``add`` may be called from the sampling thread while another thread flushes."""

    def __init__(self, path: Path, metrics: list[str]) -> None:
        self.path = path
        self.metrics = list(metrics)
        self._index = {m: i for i, m in enumerate(self.metrics)}
        self._lock = threading.Lock()
        self._buf = bytearray()
        self.samples = 0
        new = not path.exists() or path.stat().st_size == 0
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the sampler
        if new:
            self._f.write(MAGIC)

    def add(self, t_ns: int, device: int, metric: str, value: float) -> None:
        rec = RECORD.pack(t_ns, device * MAX_METRICS + self._index[metric], value)
        with self._lock:
            self._buf += rec
            self.samples += 1

    def add_many(self, records: list[tuple[int, int, str, float]]) -> None:
        """``add`` for several (t_ns, device, metric, value) samples, under one lock."""
        if not records:
            return
        index, pack = self._index, RECORD.pack
        data = b"".join(pack(t, d * MAX_METRICS + index[m], v) for t, d, m, v in records)
        with self._lock:
            self._buf += data
            self.samples += len(records)

    def flush(self) -> None:
        with self._lock:
            data, self._buf = self._buf, bytearray()
        if data and not self._f.closed:
            self._f.write(data)

    def close(self) -> None:
        self.flush()
        self._f.close()


def write_header(spool_dir: Path, pid: int, header: dict[str, Any]) -> None:
    write_json_atomic(header_path(spool_dir, pid), header)


def read_samples(path: Path) -> tuple[Any, Any, Any, bool]:
    """(t_ns, code, value) numpy arrays of every whole record, and whether the file was torn."""
    import numpy as np

    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError("not a dlscope counter spool")
    body = memoryview(data)[len(MAGIC) :]
    n = len(body) // RECORD.size
    torn = len(body) != n * RECORD.size
    rec = np.frombuffer(body, dtype=np.dtype([("t", "<i8"), ("code", "<i8"), ("v", "<f8")]), count=n)
    return rec["t"].copy(), rec["code"].copy(), rec["v"].copy(), torn
