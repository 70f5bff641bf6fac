"""The step-time decomposition behind `dlscope diff`, on hand-made loops whose parts are known
exactly: phases without GPU data; overlapping kernels on two streams; traced and untraced steps."""

from __future__ import annotations

import math

import pytest

from dlscope.analysis.compare.decompose import (
    BUSY_OVER_LABEL,
    IDLE_PARTS,
    IDLE_UNSPLIT_LABEL,
    RESIDUAL_KEY,
    decompose,
)
from dlscope.analysis.compare.diff import compare
from dlscope.analysis.core.step_idle import step_idle

from .advice_helpers import Loop


def _cpu_loop(compute_ms: float) -> Loop:
    """10 steps: 'load' 3 ms, 'compute' compute_ms (+0.1 ms per step, so steps differ), 2 ms outside."""
    lp = Loop()
    t = 0.0
    for i in range(10):
        c = compute_ms + 0.1 * i
        lp.step(i, t, t + 3 + c + 2)
        lp.phase("load", t, t + 3)
        lp.phase("compute", t + 3, t + 3 + c)
        t += 3 + c + 2
    return lp


def test_without_gpu_data_steps_split_into_phases(tmp_path):
    a = _cpu_loop(5.0).open(tmp_path / "a", devices=[])
    b = _cpu_loop(8.0).open(tmp_path / "b", devices=[])
    da = decompose(a)
    assert da.basis == "phases" and da.windows == 10
    parts = {p.key: p.ms for p in da.parts}
    assert parts == pytest.approx({"phase:load": 3.0, "phase:compute": 5.45, "phase:(outside phases)": 2.0})
    d = compare(a, b)
    assert d.total_delta_ms == pytest.approx(3.0)
    top = d.explain[0]
    assert top.name == "compute" and top.delta == pytest.approx(3.0) and top.share_pct == pytest.approx(100.0)
    assert all(c.delta == pytest.approx(0.0, abs=1e-6) for c in d.explain[1:])  # ns rounding of the loop
    p50 = d.shift("p50")
    assert p50.significant and p50.delta == pytest.approx(3.0)
    # every B step is slower (U = 0); 10 steps a side: the normal approximation, continuity-corrected
    assert p50.p_value == pytest.approx(math.erfc((50 - 0.5) / math.sqrt(10 * 10 * 21 / 12) / math.sqrt(2)))


def _gpu_loop(k1_ms: float, untraced_ms: float = 10.0, k2_end: float = 7.0) -> Loop:
    """Steps 0-2 traced (12 ms, with kernels), steps 3-9 untraced (``untraced_ms``, nothing
    recorded but the step). Each traced step: K1 on stream 7 over [1, 1 + k1_ms], K2 on stream 8
    over [3, k2_end]."""
    lp = Loop()
    t = 0.0
    for i in range(10):
        dur = 12.0 if i < 3 else untraced_ms
        lp.tables["steps"].append(
            dict(step=i, start_ns=int(t * 1e6), end_ns=int((t + dur) * 1e6), pid=1, tid=1, traced=i < 3)
        )
        if i < 3:
            lp.kernel("K1", t + 0.5, t + 1, t + 1 + k1_ms, stream=7)
            lp.kernel("K2", t + 0.6, t + 3, t + k2_end, stream=8)
        t += dur
    return lp


def test_overlapping_kernels_share_the_busy_time_and_idle_is_calibrated(tmp_path):
    a = _gpu_loop(4.0).open(tmp_path / "a")
    da = decompose(a)
    assert da.basis == "gpu" and da.windows == 3
    parts = {p.key: p.ms for p in da.parts}
    # busy: union of [1, 5] and [3, 7] = 6 ms, shared 4:4 between K1 and K2
    assert parts["kernel:K1"] == pytest.approx(3.0) and parts["kernel:K2"] == pytest.approx(3.0)
    # statistics steps are the untraced ones (10 ms): tracing slowed the host, not the GPU, so the
    # busy time stays and the idle time is what is left of the untraced step: 10 - 6 = 4 ms of
    # the traced steps' 6 ms, every cause scaled by 2/3, no residual row
    assert da.mean_step_ms == pytest.approx(10.0)
    assert da.idle_scale == pytest.approx(4.0 / 6.0)
    idle = sum(v for k, v in parts.items() if k.startswith("idle:"))
    assert idle == pytest.approx(10.0 - 6.0)
    assert RESIDUAL_KEY not in parts
    assert sum(parts.values()) == pytest.approx(10.0)


def test_the_scaled_idle_keeps_the_traced_split(tmp_path):
    """The traced steps' idle split (from step_idle, per cause) scaled by one factor."""
    a = _gpu_loop(4.0).open(tmp_path / "a")
    per_window = step_idle(a).to_pydict()
    traced = {f"idle:{c}": sum(per_window[f"{c}_ns"]) / 1e6 / 3 for c in IDLE_PARTS}
    assert sum(v > 0 for v in traced.values()) >= 2  # a split, not one cause
    assert sum(traced.values()) == pytest.approx(6.0)
    parts = {p.key: p.ms for p in decompose(a).parts if p.kind == "idle"}
    assert parts == pytest.approx({k: v * 4.0 / 6.0 for k, v in traced.items()})


def test_busy_time_beyond_the_untraced_step_is_the_only_residual(tmp_path):
    """Untraced steps of 5 ms against 6 ms of GPU busy time per traced step: no idle time is left,
    and the 1 ms the busy rows exceed the step by is a row of its own, named for it."""
    da = decompose(_gpu_loop(4.0, untraced_ms=5.0).open(tmp_path / "a"))
    parts = {p.key: p for p in da.parts}
    assert parts["kernel:K1"].ms + parts["kernel:K2"].ms == pytest.approx(6.0)
    assert all(p.ms == 0 for p in da.parts if p.kind == "idle")
    assert parts[RESIDUAL_KEY].ms == pytest.approx(-1.0)
    assert parts[RESIDUAL_KEY].name == BUSY_OVER_LABEL
    assert sum(p.ms for p in da.parts) == pytest.approx(5.0)


def test_untraced_idle_without_a_traced_split_is_a_residual(tmp_path):
    """Traced steps busy from start to end (K2 over [0, 12]) leave no idle split to scale: the
    untraced steps' idle time is a residual row that says so."""
    lp = _gpu_loop(4.0, untraced_ms=15.0, k2_end=12.0)
    for k in lp.tables["kernels"]:  # K2 from the step's start, so the GPU never idles in it
        if k["stream"] == 8:
            k["start_ns"] -= 3_000_000
    da = decompose(lp.open(tmp_path / "a"))
    parts = {p.key: p for p in da.parts}
    assert sum(p.ms for p in da.parts if p.kind == "kernel") == pytest.approx(12.0)
    assert parts[RESIDUAL_KEY].ms == pytest.approx(3.0) and parts[RESIDUAL_KEY].name == IDLE_UNSPLIT_LABEL
    assert sum(p.ms for p in da.parts) == pytest.approx(15.0)


def test_a_shorter_kernel_shows_as_its_own_row(tmp_path):
    a = _gpu_loop(4.0).open(tmp_path / "a")
    b = _gpu_loop(1.0).open(tmp_path / "b")  # K1 [1, 2], K2 [3, 7]: busy 5 ms, no overlap
    d = compare(a, b)
    rows = {c.name: c for c in d.explain}
    assert rows["K1"].a == pytest.approx(3.0) and rows["K1"].b == pytest.approx(1.0)
    assert rows["K2"].b == pytest.approx(4.0)
    assert sum(c.delta for c in d.explain) == pytest.approx(d.total_delta_ms, abs=1e-9)
    k1 = next(c for c in d.kernels if c.name == "K1")
    assert k1.a == pytest.approx(4.0) and k1.b == pytest.approx(1.0) and k1.count_a == pytest.approx(1.0)
    assert any("slowed by detailed tracing" in n for n in d.notes)


def test_memory_peaks_and_counters_are_compared(tmp_path):
    def loop(scale: float) -> Loop:
        lp = _gpu_loop(4.0)
        for i, t in enumerate((1.0, 13.0, 25.0)):
            lp.sample("mem_used", t, scale * (10 + i) * 1e9)  # NVML, bytes
            lp.sample("gpu_util", t, 50.0 * scale)
        lp.tables["counters"] += [
            dict(device=0, ts_ns=int(t * 1e6), metric="torch_allocated", value=v * scale)
            for t, v in ((2.0, 1e9), (14.0, 3e9), (26.0, 2e9))
        ]
        return lp

    d = compare(loop(1.0).open(tmp_path / "a"), loop(1.5).open(tmp_path / "b"))
    assert d.memory["peak_bytes_a"] == pytest.approx(12e9) and d.memory["peak_bytes_b"] == pytest.approx(18e9)
    torch_rows = {r["metric"]: r for r in d.memory["torch"]}
    assert torch_rows["torch_allocated"]["a"] == pytest.approx(3e9)
    assert torch_rows["torch_allocated"]["b"] == pytest.approx(4.5e9)
    util = next(r for r in d.counters if r["metric"] == "gpu_util")
    assert util["b"] / util["a"] == pytest.approx(1.5)
