"""The GPU time of each hook phase, in every step, traced or not: CUDA events at the phase's
boundaries, recorded without synchronizing and read back at later step boundaries.

Why: the host phases (:mod:`.torch_hooks`) say how long the host spent launching a forward or an
optimizer step; they do not say how long the GPU took to run what was launched. The tracer gives
that only for the traced steps. A CUDA event recorded on the launching thread's current stream when
a phase starts and another when it ends mark the work between them: the GPU reaches the first when
the phase's first work can start and the second when its last work is done. Their difference is the
phase's GPU span (its kernels, plus any gap in which the GPU waited for the host's launches or for
another stream the phase's work depends on: a DDP backward's span ends after its all-reduce).

How, without distorting the program:

* ``cudaEventRecord`` only enqueues a marker (a few microseconds of host time); nothing waits.
* Events are read at step boundaries with ``cudaEventQuery``: a mark whose end event the GPU has not
  reached stays pending until a later boundary.
* ``cudaEventElapsedTime`` gives the time between two events; the GPU clock is put on the host's by
  one *anchor* event recorded and synchronized once, on the first phase after the program itself
  initialized CUDA (never before: making a context on the wrong device is a classic multi-GPU bug).
  Elapsed times are 32-bit floats in ms (~0.5 us resolution); the anchor moves to a read mark every
  :data:`REANCHOR_MS` so the float never loses precision. The host and GPU clocks may drift apart
  by their oscillators' ppm over a run: differences within a step (spans, lags) are exact to about
  a microsecond; absolute placement over minutes is not.
* Nothing is recorded while a stream is capturing a CUDA graph (a timing event there is an error)
  or while torch.compile traces.

The events come from a small pool and are reused once read. Records go to the spool as fixed
24+24-byte structs (``<qqqq`` host start/end and GPU start/end on the perf_counter clock, then
``<qii`` tid, phase index, device); :meth:`decode` makes the ``phase_gpu`` table.
"""

from __future__ import annotations

import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

MAGIC = b"DLPGPU01"
RECORD = struct.Struct("<qqqqqii")
REANCHOR_MS = 10_000.0  # a float32 of 10 s in ms still resolves 1 us
# Re-synchronizing the clocks, without waiting: every RESYNC_NS a start marker is queried right
# after it is recorded; if the GPU was idle it is done at once, and its GPU time lies between the
# host's clock reads around the record and the query. A bracket under RESYNC_WINDOW_NS becomes the
# new anchor. The GPU's and the host's oscillators drift apart by ppm: 13 us/s (13 ppm) between an
# H100's event timer and CUPTI's host-clock timestamps was seen over a GPT-2 run.
RESYNC_NS = 2_000_000_000
RESYNC_WINDOW_NS = 30_000
POOL_LIMIT = 4096  # events kept for reuse; a program that never lets the GPU catch up gets more
# Marks are read at step boundaries; a program without steps (an inference loop under dlscope
# profile) would pile up pending events, so a phase's end also reads them past this many
POLL_PENDING = 64


class EventBackend(Protocol):
    """What the clock needs from CUDA (:class:`TorchEvents` in real use; a fake in tests)."""

    def ready(self) -> bool: ...  # CUDA initialized by the program, not capturing
    def device(self) -> int: ...
    def new_event(self) -> Any: ...
    def record(self, event: Any) -> None: ...  # on the current stream of the current device
    def query(self, event: Any) -> bool: ...
    def synchronize(self, event: Any) -> None: ...
    def elapsed_ms(self, a: Any, b: Any) -> float: ...


class TorchEvents:
    """:class:`EventBackend` over ``torch.cuda``, calling its C bindings directly where they exist:
    ``torch.cuda.current_stream()`` builds a Python object per call and the Event methods add a
    Python frame each; measured on an H100 the public calls made a phase's marks cost ~36 us."""

    def __init__(self, torch: Any) -> None:
        self.cuda = torch.cuda
        C = torch._C
        self._initialized: Callable[[], bool] = getattr(torch.cuda, "is_initialized", lambda: True)
        self._capturing: Any = getattr(C, "_cuda_isCurrentStreamCapturing", None) or getattr(
            torch.cuda, "is_current_stream_capturing", lambda: False
        )
        self._get_device = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
        self._raw_stream = getattr(C, "_cuda_getCurrentRawStream", None)
        base = getattr(C, "_CudaEventBase", None)
        self._record = getattr(base, "record", None)
        self._query = getattr(base, "query", None) or (lambda e: e.query())
        self._elapsed = getattr(base, "elapsed_time", None) or (lambda a, b: a.elapsed_time(b))
        self._streams: dict[tuple[int, int], Any] = {}  # (device, raw stream) -> torch Stream

    def ready(self) -> bool:
        return bool(self._initialized()) and not self._capturing()

    def device(self) -> int:
        return int(self._get_device())

    def new_event(self) -> Any:
        return self.cuda.Event(enable_timing=True)

    def record(self, event: Any) -> None:
        if self._raw_stream is None or self._record is None:
            event.record()
            return
        dev = self._get_device()
        key = (dev, self._raw_stream(dev))
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = self.cuda.current_stream()
        self._record(event, stream)

    def query(self, event: Any) -> bool:
        return bool(self._query(event))

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def elapsed_ms(self, a: Any, b: Any) -> float:
        return float(self._elapsed(a, b))


class _Anchor:
    """An event whose time on the host's perf_counter clock is known."""

    __slots__ = ("event", "host_ns")

    def __init__(self, event: Any, host_ns: int) -> None:
        self.event, self.host_ns = event, host_ns


class PhaseGpuClock:
    """Marks phases with CUDA events and turns the read marks into spool records."""

    def __init__(
        self, backend: EventBackend, names: tuple[str, ...], clock: Callable[[], int] = time.perf_counter_ns
    ) -> None:
        self.backend = backend
        self.index = {n: i for i, n in enumerate(names)}
        self.clock = clock
        self._pool: list[Any] = []
        self._pending: deque[tuple[int, int, int, int, Any, Any, int, int]] = deque()
        self._anchors: dict[int, _Anchor] = {}
        self._resynced: dict[int, int] = {}  # device -> host time of the last resync attempt
        self.resyncs = 0
        self._done: list[bytes] = []
        self._lock = threading.Lock()
        self._polling = threading.Lock()  # one reader at a time (step boundaries, phase ends)
        self.marks = 0
        self.failed: str | None = None

    # ---- marking (on the program's threads) ---------------------------------------------------
    def begin(self, name: str) -> Any:
        """Record the start marker of phase ``name``; returns the token :meth:`end` takes, or None
        when nothing can be recorded now."""
        if self.failed is not None:
            return None
        try:
            b = self.backend
            if not b.ready():
                return None
            dev = b.device()
            if dev not in self._anchors:
                self._anchor(dev)
            ev = self._pool.pop() if self._pool else b.new_event()
            before = self.clock()
            b.record(ev)
            anchor_ns = None
            if before - self._resynced.get(dev, before) > RESYNC_NS:
                self._resynced[dev] = before
                # if the GPU is idle it reaches the marker within microseconds: spin that long
                # at most (every RESYNC_NS: a few parts per million of the run)
                while True:
                    done, after = b.query(ev), self.clock()
                    if done or after - before > RESYNC_WINDOW_NS:
                        break
                if done and after - before <= RESYNC_WINDOW_NS:
                    anchor_ns = (before + after) // 2
            return (self.index[name], dev, before, ev, anchor_ns)
        except Exception as e:  # a broken context: stop marking, keep the program running
            self.failed = f"{e.__class__.__name__}: {e}"
            return None

    def end(self, token: Any) -> None:
        if token is None or self.failed is not None:
            return
        idx, dev, host_start, start_ev, anchor_ns = token
        try:
            b = self.backend
            if not b.ready() or b.device() != dev:
                self._pool.append(start_ev)
                return
            ev = self._pool.pop() if self._pool else b.new_event()
            b.record(ev)
            self._pending.append(
                (threading.get_native_id(), idx, dev, host_start, start_ev, ev, self.clock(), anchor_ns)
            )
        except Exception as e:
            self.failed = f"{e.__class__.__name__}: {e}"
            return
        if len(self._pending) > POLL_PENDING:
            self.poll()

    def _anchor(self, dev: int) -> None:
        b = self.backend
        ev = b.new_event()
        b.record(ev)
        b.synchronize(ev)  # once per device: the only wait this clock ever makes
        self._anchors[dev] = _Anchor(ev, self.clock())
        self._resynced[dev] = self.clock()

    # ---- reading back (at step boundaries) -----------------------------------------------------
    def poll(self, wait: bool = False) -> None:
        """Read every pending mark the GPU has passed, oldest first (the stream runs them in
        order); with ``wait``, wait for them all (at stop)."""
        if self.failed is not None or not self._polling.acquire(blocking=False):
            return  # another thread is reading them now
        try:
            self._poll(wait)
        finally:
            self._polling.release()

    def _poll(self, wait: bool) -> None:
        b = self.backend
        out: list[bytes] = []
        try:
            while self._pending:
                tid, idx, dev, host_start, start_ev, end_ev, host_end, anchor_ns = self._pending[0]
                if wait:
                    b.synchronize(end_ev)
                elif not b.query(end_ev):
                    break
                self._pending.popleft()
                if anchor_ns is not None:  # a resync: this mark's start is the new anchor
                    old = self._anchors[dev].event
                    self._anchors[dev] = _Anchor(start_ev, anchor_ns)
                    self._recycle(old)
                    self.resyncs += 1
                anchor = self._anchors[dev]
                start_ms = b.elapsed_ms(anchor.event, start_ev)
                end_ms = b.elapsed_ms(anchor.event, end_ev)
                gpu_start = anchor.host_ns + round(start_ms * 1e6)
                gpu_end = anchor.host_ns + round(end_ms * 1e6)
                out.append(RECORD.pack(host_start, host_end, gpu_start, gpu_end, tid, idx, dev))
                self.marks += 1
                if end_ms > REANCHOR_MS:  # move the anchor to this mark's end event
                    self._anchors[dev] = _Anchor(end_ev, gpu_end)
                    self._recycle(anchor.event)
                    self._recycle(start_ev)
                else:
                    self._recycle(start_ev)
                    self._recycle(end_ev)
        except Exception as e:
            self.failed = f"{e.__class__.__name__}: {e}"
        if out:
            with self._lock:
                self._done += out

    def _recycle(self, ev: Any) -> None:
        if len(self._pool) < POOL_LIMIT and all(ev is not a.event for a in self._anchors.values()):
            self._pool.append(ev)

    def take(self) -> bytes:
        """The records read since the last call, as spool bytes."""
        with self._lock:
            done, self._done = self._done, []
        return b"".join(done)


# ---- the spool -------------------------------------------------------------------------------
def spool_path(spool_dir: Path, pid: int) -> Path:
    return spool_dir / f"{pid}.phase_gpu.spool"


def append(path: Path, data: bytes) -> None:
    if not data:
        return
    new = not path.exists() or path.stat().st_size == 0
    with path.open("ab") as f:
        if new:
            f.write(MAGIC)
        f.write(data)


def read(path: Path) -> tuple[list[tuple[int, ...]], bool]:
    """The whole records of a spool, and whether its tail was torn (a write cut short)."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError("not a dlscope phase_gpu spool")
    body = memoryview(data)[len(MAGIC) :]
    n = len(body) // RECORD.size
    return [RECORD.unpack_from(body, i * RECORD.size) for i in range(n)], len(body) != n * RECORD.size
