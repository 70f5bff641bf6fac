"""The NVML counter sampler: one loop that reads every visible GPU's counters on a schedule.

Cheap counters (utilization, memory, power, clocks, temperature, throttle reasons) are read
every ``interval`` (50 ms by default). GPM metrics (SM activity and occupancy, tensor-core
activity, DRAM bandwidth, PCIe and NVLink throughput) are differences between two GPM samples:
a new sample is taken once the previous one is at least ``gpm_interval`` (>= 100 ms) old, the
metrics are computed over that pair, and the value is stamped at the middle of the pair's
window (it is that window's average). A metric a GPU cannot give is dropped for that GPU with
its reason; passing faults are retried.

The loop runs in a thread of the ``dlscope profile`` parent, or, under the in-process API, in a
helper process started by :mod:`dlscope.capture.nvml` (``python -m
dlscope.capture.nvml_sampler``): either way never in a thread of the profiled program, so it
never holds the program's GIL. The helper stops when told (a line ``stop`` or EOF on stdin), on
SIGTERM, or when its parent dies.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CollectorUnavailable
from . import counter_spool, nvml_api
from .nvml_api import FAST_GROUPS, GPM_METRICS, Gpu

MIN_GPM_INTERVAL_MS = 100
# GPM pairs are 200 ms apart by default: a pair costs about 285 us of CPU on an H100 (sample
# 92 us + metrics 193 us, measured in bench/gpu_hw_layer.py), and at 100 ms the sampler went over
# its budget of 1% of a core. 100 ms is the shortest interval GPM measures reliably.
DEFAULT_GPM_INTERVAL_MS = 200
MAX_TRANSIENT_FAILURES = 50  # consecutive failures of one reading before it is given up


class Sampler:
    """Samples ``gpus`` into ``writer``. Drive it with :meth:`run`, or call :meth:`tick` (tests)."""

    def __init__(
        self,
        nvml: Any,
        gpus: list[Gpu],
        writer: counter_spool.SampleWriter,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        interval_ms: float = 50,
        gpm_interval_ms: float = MIN_GPM_INTERVAL_MS,
    ) -> None:
        self.nvml = nvml
        self.gpus = gpus
        self.writer = writer
        self.clock = clock
        self.interval_ns = int(max(interval_ms, 1) * 1e6)
        self.gpm_interval_ns = int(max(gpm_interval_ms, MIN_GPM_INTERVAL_MS) * 1e6)
        self.readers = nvml_api.fast_readers(nvml)
        self.ticks = 0
        self.header: dict[str, Any] = {}  # the spool header (see open_sampler)
        self._failures: dict[tuple[int, str], int] = {}
        self._groups: dict[int, list[str]] = {g.index: list(FAST_GROUPS) for g in gpus}
        self._gpm: dict[int, nvml_api.GpmPair] = {}
        self._gpm_t: dict[int, int] = {}  # time of each GPU's previous GPM sample
        for g in gpus:
            if g.gpm:
                try:
                    self._gpm[g.index] = nvml_api.GpmPair(nvml, g.handle, list(GPM_METRICS))
                except Exception as e:
                    self._give_up(g, list(GPM_METRICS), f"GPM sample buffers: {nvml_api.error_text(e)}")
        self._next_fast = clock()
        self._next_gpm = self._next_fast

    # ---- one round ----------------------------------------------------------------------------
    def tick(self) -> int:
        """Take whatever samples are due now; returns the clock time of the next due sample."""
        now = self.clock()
        if now >= self._next_fast:
            self.ticks += 1
            self._sample_fast()
            self._next_fast += self.interval_ns
            if self._next_fast <= now:  # fell behind (suspended, overloaded): skip, do not burst
                self._next_fast = now + self.interval_ns
        if self._gpm and now >= self._next_gpm:
            self._sample_gpm()
        if not self._gpm:
            return self._next_fast
        # each GPU's next GPM sample is due one interval after its previous one
        self._next_gpm = min(self._gpm_t.get(i, now) + self.gpm_interval_ns for i in self._gpm)
        return min(self._next_fast, self._next_gpm)

    def _sample_fast(self) -> None:
        # The hot loop of the sampler (20 times a second): one clock read per GPU, every record of
        # the tick handed to the writer at once, failures dealt with after the loop.
        records: list[tuple[int, int, str, float]] = []
        failed: list[tuple[Gpu, str, BaseException]] = []
        readers, failures = self.readers, self._failures
        for g in self.gpus:
            t = self.clock()
            for group in self._groups[g.index]:
                try:
                    values = readers[group](g.handle)
                except Exception as e:
                    failed.append((g, group, e))
                    continue
                if failures:
                    failures.pop((g.index, group), None)
                records += [(t, g.index, metric, v) for metric, v in zip(FAST_GROUPS[group], values)]
        self.writer.add_many(records)
        for g, group, err in failed:
            self._failed(g, group, list(FAST_GROUPS[group]), err)

    def _sample_gpm(self) -> None:
        for g in self.gpus:
            pair = self._gpm.get(g.index)
            if pair is None:
                continue
            prev_t = self._gpm_t.get(g.index)
            if prev_t is not None and self.clock() - prev_t < self.gpm_interval_ns:
                continue  # a pair closer than the interval would not be measured reliably
            try:
                pair.sample()
                t = self.clock()
                values = pair.compare() if pair.have_prev else {}
            except Exception as e:
                self._failed(g, "gpm", list(pair.metrics), e)
                if g.index not in self._gpm:
                    continue
                pair.have_prev = False  # start a new pair after a failure
                continue
            self._failures.pop((g.index, "gpm"), None)
            if prev_t is not None and pair.have_prev:
                mid = (prev_t + t) // 2
                for metric, v in values.items():
                    if isinstance(v, str):
                        self._give_up(g, [metric], v)
                        pair.metrics = [m for m in pair.metrics if m != metric]
                        pair.ids = [int(getattr(self.nvml, GPM_METRICS[m][0])) for m in pair.metrics]
                    else:
                        self.writer.add(mid, g.index, metric, v)
                if not pair.metrics:
                    self._drop_gpm(g)
                    continue
            pair.swap()
            self._gpm_t[g.index] = t

    # ---- failures -----------------------------------------------------------------------------
    def _failed(self, g: Gpu, group: str, metrics: list[str], e: BaseException) -> None:
        key = (g.index, group)
        n = self._failures[key] = self._failures.get(key, 0) + 1
        if nvml_api.is_permanent(self.nvml, e):
            self._give_up(g, metrics, nvml_api.error_text(e))
        elif n >= MAX_TRANSIENT_FAILURES:
            self._give_up(g, metrics, f"failed {n} times in a row ({nvml_api.error_text(e)})")
        else:
            return
        if group == "gpm":
            self._drop_gpm(g)
        elif group in self._groups[g.index]:
            self._groups[g.index].remove(group)

    def _give_up(self, g: Gpu, metrics: list[str], reason: str) -> None:
        for m in metrics:
            g.unavailable.setdefault(m, reason)

    def _drop_gpm(self, g: Gpu) -> None:
        pair = self._gpm.pop(g.index, None)
        if pair is not None:
            pair.free()

    # ---- loop ---------------------------------------------------------------------------------
    def run(
        self, stop: threading.Event, should_stop: Callable[[], bool] = lambda: False, flush_every_s: float | None = None
    ) -> None:
        """Sample until ``stop`` is set or ``should_stop()`` is true; flush every ``flush_every_s``."""
        next_flush = time.monotonic() + flush_every_s if flush_every_s else None
        while not stop.is_set() and not should_stop():
            due = self.tick()
            if next_flush is not None and time.monotonic() >= next_flush:
                self.writer.flush()
                next_flush = time.monotonic() + (flush_every_s or 1.0)
            stop.wait(max(due - self.clock(), 0) / 1e9)

    def close(self) -> None:
        for i in list(self._gpm):
            self._gpm.pop(i).free()
        self.writer.close()

    def unavailable(self) -> dict[str, str]:
        """metric -> reason, merged over GPUs ('GPU i: reason' when they differ)."""
        per: dict[str, dict[int, str]] = {}
        for g in self.gpus:
            for m, r in g.unavailable.items():
                per.setdefault(m, {})[g.index] = r
        out = {}
        for m, by_gpu in per.items():
            reasons = set(by_gpu.values())
            if len(reasons) == 1 and len(by_gpu) == len(self.gpus):
                out[m] = reasons.pop()
            else:
                out[m] = "; ".join(f"GPU {i}: {r}" for i, r in sorted(by_gpu.items()))
        return out


# ---- setting up and tearing down (shared by the thread and the helper process) --------------
def open_sampler(
    spool_dir: Path,
    pid: int,
    *,
    nvml_module: str = "pynvml",
    interval_ms: float = 50,
    gpm_interval_ms: float = MIN_GPM_INTERVAL_MS,
    mode: str = "thread",
    env: dict[str, str] | None = None,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Sampler:
    """Find the GPUs, open the spool, write its header; raises CollectorUnavailable(reason)."""
    env = dict(os.environ) if env is None else env
    reason = nvml_api.precheck(env) if nvml_module == "pynvml" else None
    if reason:
        raise CollectorUnavailable(reason)
    nvml = nvml_api.load(nvml_module)
    try:
        gpus, notes = nvml_api.open_gpus(nvml, env.get("CUDA_VISIBLE_DEVICES"))
    except CollectorUnavailable:
        _shutdown(nvml)
        raise
    writer = counter_spool.SampleWriter(counter_spool.spool_path(spool_dir, pid), list(nvml_api.ALL_METRICS))
    sampler = Sampler(nvml, gpus, writer, clock=clock, interval_ms=interval_ms, gpm_interval_ms=gpm_interval_ms)
    sampler.header = {
        "version": 1,
        "status": "ok",
        "reason": "",
        "clock": "perf_counter_ns",
        "pid": pid,
        "metrics": writer.metrics,
        "devices": [g.info for g in gpus],
        "notes": notes,
        "settings": {
            "mode": mode,
            "interval_ms": interval_ms,
            "gpm_interval_ms": max(gpm_interval_ms, MIN_GPM_INTERVAL_MS),
        },
    }
    write_header(spool_dir, pid, sampler)
    return sampler


def write_header(spool_dir: Path, pid: int, sampler: Sampler, **extra: Any) -> None:
    header = dict(sampler.header)
    header["unavailable"] = sampler.unavailable()
    header["samples"] = sampler.writer.samples
    header["ticks"] = sampler.ticks
    header.update(extra)
    counter_spool.write_header(spool_dir, pid, header)


def close_sampler(spool_dir: Path, pid: int, sampler: Sampler, cpu_s: float, wall_s: float, **extra: Any) -> None:
    sampler.close()
    write_header(spool_dir, pid, sampler, final=True, cpu_s=cpu_s, wall_s=wall_s, **extra)
    _shutdown(sampler.nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


# ---- the helper process ------------------------------------------------------------------------
def _parent_gone(parent: int) -> Callable[[], bool]:
    return lambda: os.getppid() != parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dlscope.capture.nvml_sampler")
    ap.add_argument("--spool-dir", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the session's pid (names the spool files)")
    ap.add_argument("--interval-ms", type=float, default=50)
    ap.add_argument("--gpm-interval-ms", type=float, default=DEFAULT_GPM_INTERVAL_MS)
    ap.add_argument("--flush-s", type=float, default=1.0)
    ap.add_argument("--nvml-module", default="pynvml")
    args = ap.parse_args(argv)
    parent = os.getppid()
    spool_dir = Path(args.spool_dir)
    stop = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the program; its parent stops us
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin() -> None:
        for line in sys.stdin.buffer:
            if line.strip() == b"stop":
                break
        stop.set()  # told to stop, or EOF: the parent closed the pipe or died

    threading.Thread(target=watch_stdin, name="dlscope-nvml-stdin", daemon=True).start()
    try:
        sampler = open_sampler(
            spool_dir,
            args.pid,
            nvml_module=args.nvml_module,
            interval_ms=args.interval_ms,
            gpm_interval_ms=args.gpm_interval_ms,
            mode="process",
        )
    except CollectorUnavailable as e:
        counter_spool.write_header(
            spool_dir,
            args.pid,
            {"version": 1, "status": "unavailable", "reason": str(e), "final": True, "sampler_pid": os.getpid()},
        )
        return 0
    sampler.header["sampler_pid"] = os.getpid()
    write_header(spool_dir, args.pid, sampler)
    # the loop's CPU, as in thread mode (NVML's initialization and the interpreter's start-up are
    # in cpu_total_s)
    wall0, cpu0 = time.monotonic(), time.process_time()
    try:
        sampler.run(stop, _parent_gone(parent), flush_every_s=args.flush_s)
    except Exception as e:  # never leave the spool without a final header
        sampler.header["status"], sampler.header["reason"] = "failed", f"{e.__class__.__name__}: {e}"
    # cpu_total_s: the whole helper's CPU, interpreter start-up and imports included
    close_sampler(
        spool_dir,
        args.pid,
        sampler,
        time.process_time() - cpu0,
        time.monotonic() - wall0,
        cpu_total_s=time.process_time(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
