"""The GPU time of hook phases from CUDA events (capture.phase_events), against a simulated GPU.

The fake backend runs a GPU timeline of its own: each recorded event is reached when the GPU has
finished the work queued before it (the host says how much work each phase launches), on a GPU
clock that starts at an arbitrary offset from the host's and whose elapsed times come back as
float32 milliseconds, as ``cudaEventElapsedTime`` gives them. The clock must put every mark back on
the host clock (to the microsecond), never read a mark the GPU has not reached, and never wait
except once for the anchor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from dlscope.capture import phase_events
from dlscope.capture.base import DecodeContext
from dlscope.capture.phase_events import PhaseGpuClock
from dlscope.capture.torch_hooks import GPU_PHASES, TorchPhaseHooks
from dlscope.store.build import ProfileBuilder

GPU_OFFSET_NS = 987_654_321_000  # the GPU timer's zero is not the host's


class FakeEvent:
    def __init__(self) -> None:
        self.gpu_ns: int | None = None  # when the simulated GPU reaches it


class FakeGpu:
    """One stream: work queued by :meth:`launch` runs back to back, never before it was launched."""

    def __init__(self) -> None:
        self.host_ns = 1_000_000_000
        self.gpu_free_ns = 0  # host time at which the stream's queued work is done
        self.initialized = True
        self.capturing = False
        self.syncs = 0
        self.queries = 0
        self.drift_ppm = 0.0  # the GPU timer runs this much fast against the host's clock

    # the host's side
    def advance(self, ns: int) -> None:
        self.host_ns += ns

    def launch(self, work_ns: int) -> None:
        self.gpu_free_ns = max(self.gpu_free_ns, self.host_ns) + work_ns

    # EventBackend
    def ready(self) -> bool:
        return self.initialized and not self.capturing

    def device(self) -> int:
        return 0

    def new_event(self) -> FakeEvent:
        return FakeEvent()

    def record(self, ev: FakeEvent) -> None:
        ev.gpu_ns = max(self.gpu_free_ns, self.host_ns)

    def query(self, ev: FakeEvent) -> bool:
        self.queries += 1
        self.host_ns += 500  # a query takes the host's time too (and a spin on it ends)
        return ev.gpu_ns is not None and ev.gpu_ns <= self.host_ns

    def synchronize(self, ev: FakeEvent) -> None:
        self.syncs += 1
        self.host_ns = max(self.host_ns, ev.gpu_ns or 0)

    def elapsed_ms(self, a: FakeEvent, b: FakeEvent) -> float:
        # on the GPU's own clock, rounded to float32 ms like cudaEventElapsedTime
        ga, gb = a.gpu_ns + GPU_OFFSET_NS, b.gpu_ns + GPU_OFFSET_NS
        return float(np.float32((gb - ga) * (1 + self.drift_ppm * 1e-6) / 1e6))

    def clock(self) -> int:
        return self.host_ns


def run_steps(
    gpu: FakeGpu,
    clock: PhaseGpuClock,
    steps: int,
    expected: list,
    host_ms: float = 2.0,
    gpu_ms: dict[str, float] | None = None,
) -> None:
    """Each step: forward, backward, optimizer, each launching ``gpu_ms[phase]`` of work over
    ``host_ms`` of host time; the clock is polled at every step boundary."""
    gpu_ms = gpu_ms or {"forward": 3.0137, "backward": 6.0011, "optimizer": 0.5123}
    for _ in range(steps):
        clock.poll()
        for name in GPU_PHASES:
            tok = clock.begin(name)
            host_start = gpu.host_ns
            gpu_start = max(gpu.gpu_free_ns, gpu.host_ns)
            gpu.advance(int(host_ms * 1e6 / 2))
            gpu.launch(int(gpu_ms[name] * 1e6))
            gpu.advance(int(host_ms * 1e6 / 2))
            clock.end(tok)
            expected.append((name, host_start, gpu.host_ns, gpu_start, max(gpu.gpu_free_ns, gpu.host_ns)))
        gpu.advance(173_411)  # odd numbers, so that float32 ms rounding shows


def decoded(clock: PhaseGpuClock, tmp_path: Path, offset_ns: int = 0) -> list[dict]:
    spool = phase_events.spool_path(tmp_path, 42)
    phase_events.append(spool, clock.take())
    ctx = DecodeContext(pid=42, rank=3, offset_ns=offset_ns, session={})
    t = TorchPhaseHooks.decode(tmp_path, 42, ctx)["phase_gpu"]
    return t.to_pylist()


def test_marks_come_back_on_the_host_clock(tmp_path):
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    expected: list = []
    run_steps(gpu, clock, 20, expected)
    gpu.advance(10**9)  # let the GPU finish, then read the rest at the next boundary
    clock.poll()
    rows = decoded(clock, tmp_path, offset_ns=5_000)
    assert len(rows) == len(expected) == 60
    for r, (name, hs, he, gs, ge) in zip(rows, expected):
        assert r["name"] == name and r["rank"] == 3 and r["pid"] == 42
        assert (r["start_ns"], r["end_ns"]) == (hs + 5_000, he + 5_000)
        # float32 ms over ~0.3 s: well under a microsecond of error
        assert abs(r["gpu_start_ns"] - (gs + 5_000)) < 1_000, (r, gs)
        assert abs(r["gpu_end_ns"] - (ge + 5_000)) < 1_000, (r, ge)
    # the GPU is the bottleneck here: backward's span is its own 6 ms of work plus the queue it
    # found, never shorter than its work
    spans = [r["gpu_end_ns"] - r["gpu_start_ns"] for r in rows if r["name"] == "backward"]
    assert min(spans) >= 6.0011e6 - 1_000
    assert gpu.syncs == 1  # the anchor, once


def test_a_mark_the_gpu_has_not_reached_stays_pending(tmp_path):
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    expected: list = []
    # the GPU is far behind: 50 ms of work per phase for 1 ms of host time
    run_steps(gpu, clock, 3, expected, host_ms=1.0, gpu_ms={"forward": 50, "backward": 50, "optimizer": 50})
    clock.poll()
    assert clock.marks < len(expected)
    gpu.advance(10**9)
    clock.poll()
    rows = decoded(clock, tmp_path)
    assert len(rows) == len(expected)
    for r, (_, _, _, gs, ge) in zip(rows, expected):
        assert abs(r["gpu_end_ns"] - ge) < 1_000 and abs(r["gpu_start_ns"] - gs) < 1_000
    assert gpu.syncs == 1


def test_long_runs_keep_microsecond_precision_by_moving_the_anchor(tmp_path):
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    expected: list = []
    for _ in range(6):  # 6 bursts 20 s apart: 100 s in all; float32 ms of 100 s is off by ~4 us
        run_steps(gpu, clock, 5, expected)
        gpu.advance(20 * 10**9)
    clock.poll()
    rows = decoded(clock, tmp_path)
    assert len(rows) == len(expected)
    err = max(
        max(abs(r["gpu_start_ns"] - gs), abs(r["gpu_end_ns"] - ge)) for r, (_, _, _, gs, ge) in zip(rows, expected)
    )
    assert err < 2_000, err


def _drifting_run(tmp_path: Path) -> tuple[PhaseGpuClock, int]:
    """Ten bursts of 5 steps, 10 s apart, on a GPU timer 20 ppm fast (over 100 s, 2 ms off without
    resyncs); the steps leave the GPU idle at some markers (a host-bound optimizer), as a step
    ending in .item() does. Returns the clock and the largest error of a mark, in ns."""
    gpu = FakeGpu()
    gpu.drift_ppm = 20.0
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    expected: list = []
    for _ in range(10):
        run_steps(gpu, clock, 5, expected, gpu_ms={"forward": 3.0137, "backward": 6.0011, "optimizer": 0.1})
        gpu.advance(10 * 10**9)
    clock.poll()
    tmp_path.mkdir(exist_ok=True)
    rows = decoded(clock, tmp_path)
    assert len(rows) == len(expected)
    return clock, max(
        max(abs(r["gpu_start_ns"] - gs), abs(r["gpu_end_ns"] - ge)) for r, (_, _, _, gs, ge) in zip(rows, expected)
    )


def test_clock_drift_is_corrected_whenever_the_gpu_is_idle_at_a_marker(tmp_path, monkeypatch):
    clock, err = _drifting_run(tmp_path / "a")
    assert clock.resyncs >= 9 and err < 50_000, (clock.resyncs, err)  # 20 ppm of the 10 s between resyncs: 0.2 ms
    monkeypatch.setattr(phase_events, "RESYNC_NS", 10**15)  # without the resyncs the error grows with the run
    clock, err = _drifting_run(tmp_path / "b")
    assert clock.resyncs == 0 and err > 1_000_000


def test_nothing_is_recorded_before_cuda_is_initialized_or_while_capturing(tmp_path):
    gpu = FakeGpu()
    gpu.initialized = False
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    expected: list = []
    run_steps(gpu, clock, 2, expected)
    gpu.initialized, gpu.capturing = True, True
    run_steps(gpu, clock, 2, expected)
    gpu.advance(10**9)
    clock.poll()
    assert clock.take() == b"" and gpu.syncs == 0  # no anchor: no CUDA call that could make a context


def test_a_failing_backend_stops_marking_and_keeps_the_program_running():
    class Broken(FakeGpu):
        def record(self, ev):
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    gpu = Broken()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    assert clock.begin("forward") is None
    assert clock.failed and "illegal memory access" in clock.failed
    clock.end(None)
    clock.poll()
    assert clock.take() == b""


def test_a_torn_spool_keeps_its_whole_records(tmp_path):
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    run_steps(gpu, clock, 4, [])
    gpu.advance(10**9)
    clock.poll()
    spool = phase_events.spool_path(tmp_path, 42)
    phase_events.append(spool, clock.take())
    whole = (spool.stat().st_size - len(phase_events.MAGIC)) // phase_events.RECORD.size
    with spool.open("ab") as f:
        f.write(b"\x01\x02\x03")
    ctx = DecodeContext(pid=42, rank=0, offset_ns=0, session={})
    t = TorchPhaseHooks.decode(tmp_path, 42, ctx)["phase_gpu"]
    assert t.num_rows == whole == 12
    assert any("phase_gpu spool ended inside a write" in n for n in ctx.notes)


def test_the_builder_gives_each_mark_its_step(tmp_path):
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    starts = []
    for _ in range(3):
        starts.append(gpu.host_ns)
        run_steps(gpu, clock, 1, [])
    ends = starts[1:] + [gpu.host_ns]
    gpu.advance(10**9)
    clock.poll()
    rows = decoded(clock, tmp_path)
    b = ProfileBuilder()
    b.add("phase_gpu", pa.Table.from_pylist(rows))
    b.add(
        "steps",
        pa.table(
            {
                "rank": [3] * 3,
                "step": [0, 1, 2],
                "start_ns": starts,
                "end_ns": ends,
                "pid": [42] * 3,
                "tid": [1] * 3,
                "source": ["dlscope"] * 3,
                "warmup": [False] * 3,
            }
        ),
    )
    out = b.build()["phase_gpu"].to_pylist()
    assert [r["step"] for r in out] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


# ---- on a real H100 profile (GPT-2 124M class, bench/advice_truth; dlscope profile, default mode) --
REAL = Path(__file__).parent / "data" / "phase_gpu" / "gpt2_baseline.dlscope"


def test_real_marks_hold_the_kernels_each_phase_launched():
    """In the traced steps CUPTI timed every kernel on its own clock path: each kernel launched
    during a host phase must run inside that phase's GPU span, to the clocks' agreement (tens of
    microseconds), and the spans must be as long as the work in them."""
    from dlscope.analysis.core.context import ProfileData

    d = ProfileData.open(REAL)
    rows = d.con.execute("""
        WITH ph AS (SELECT p.* FROM phase_gpu p JOIN steps s ON s.rank = p.rank AND s.step = p.step AND s.traced),
             k AS (SELECT k.start_ns, k.end_ns, a.start_ns AS launch FROM kernels k
                   JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id)
        SELECT ph.name, ph.step, count(*), min(k.start_ns) - ph.gpu_start_ns, ph.gpu_end_ns - max(k.end_ns),
               ph.gpu_end_ns - ph.gpu_start_ns, sum(k.end_ns - k.start_ns)
        FROM ph JOIN k ON k.launch >= ph.start_ns AND k.launch < ph.end_ns
        WHERE ph.step > 0  -- step 0 holds cuDNN/cuBLAS start-up outside the kernels
        GROUP BY ph.name, ph.step, ph.gpu_start_ns, ph.gpu_end_ns""").fetchall()
    assert len(rows) == 15  # forward, backward, optimizer in each of the 5 traced steps after the first
    for name, step, n, head, tail, span, busy in rows:
        assert n > 50, (name, step)
        assert -50_000 < tail < 50_000, (name, step, tail)  # the last kernel ends at the end marker
        assert -50_000 < head < 300_000, (name, step, head)  # the first starts at (or soon after) the start
        assert busy <= span + 50_000 and (name == "optimizer" or busy > 0.85 * span), (name, step, busy, span)


def test_the_phase_report_gives_every_steps_gpu_span():
    """phase_sum's gpu_span_ms: the marks summed by hand over the statistics steps; and on the
    GPU-bound forward and backward it matches the traced steps' kernel time (CUPTI) within 5%."""
    from dlscope.analysis.core.context import ProfileData
    from dlscope.analysis.reports import phase_sum

    d = ProfileData.open(REAL)
    res = phase_sum.compute(d).table.to_pylist()
    got = {r["name"]: r for r in res if r["source"] == "hook"}
    steps = d.con.execute("SELECT rank, step FROM stat_steps").fetchall()
    marks = d.con.execute("SELECT rank, step, name, gpu_start_ns, gpu_end_ns FROM phase_gpu").fetchall()
    for name in ("forward", "backward", "optimizer"):
        want = sum(ge - gs for r, s, n, gs, ge in marks if n == name and (r, s) in set(steps)) / 1e6 / len(steps)
        assert got[name]["gpu_span_ms"] == pytest.approx(want, rel=1e-9)
    for name in ("forward", "backward"):
        assert got[name]["gpu_span_ms"] == pytest.approx(got[name]["gpu_ms"], rel=0.05)


def test_a_program_without_step_boundaries_does_not_pile_up_events(tmp_path):
    """An inference loop has no step boundary to read the marks at: a phase's end reads them once
    POLL_PENDING are waiting, so the pending events (a CUDA resource each) stay bounded."""
    gpu = FakeGpu()
    clock = PhaseGpuClock(gpu, GPU_PHASES, clock=gpu.clock)
    for _ in range(500):  # forward only, never a poll from outside
        tok = clock.begin("forward")
        gpu.advance(500_000)
        gpu.launch(400_000)
        gpu.advance(500_000)
        clock.end(tok)
    assert phase_events.POLL_PENDING < 100
    assert len(clock._pending) <= 100 and clock.marks >= 400
    assert len(clock._pool) < 200  # events are reused, not made anew for every mark
