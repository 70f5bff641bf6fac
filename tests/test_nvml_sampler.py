"""The NVML sampler on a fake NVML and a fake clock: schedule, units, the 100 ms GPM pairing,
and every way a counter can be unavailable."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dlscope.capture import counter_spool, nvml_api
from dlscope.capture.nvml_sampler import Sampler, close_sampler, open_sampler
from dlscope.errors import CollectorUnavailable

from .conftest import FakeClock
from .fake_nvml import MIB, NVML_ERROR_DRIVER_NOT_LOADED, FakeGpu, FakeNvml

MS = 1_000_000


def read(spool_dir, pid=1):
    t, code, v, torn = counter_spool.read_samples(counter_spool.spool_path(spool_dir, pid))
    assert not torn
    metrics = list(nvml_api.ALL_METRICS)
    return [
        (int(a), int(c) // counter_spool.MAX_METRICS, metrics[int(c) % counter_spool.MAX_METRICS], float(x))
        for a, c, x in zip(t, code, v)
    ]


def make(tmp_path, clock, gpus, **kw):
    """An open sampler on a fake NVML registered as an importable module."""
    fake = FakeNvml(clock, gpus)
    sys.modules["dlscope_fake_nvml"] = fake  # type: ignore[assignment]
    try:
        s = open_sampler(tmp_path, 1, nvml_module="dlscope_fake_nvml", clock=clock, env={}, **kw)
    finally:
        del sys.modules["dlscope_fake_nvml"]
    return fake, s


def drive(sampler: Sampler, clock: FakeClock, until_ns: int, steps_ns) -> None:
    """Tick at the given irregular steps (cycled) until the clock passes ``until_ns``."""
    i = 0
    while clock.t < until_ns:
        sampler.tick()
        clock.advance(steps_ns[i % len(steps_ns)])
        i += 1
    sampler.writer.flush()


def test_cheap_metrics_every_interval_in_schema_units(tmp_path):
    clock = FakeClock(10**9)
    t0 = clock.t
    gpu = FakeGpu(segments=[(t0 + 200 * MS, t0 + 400 * MS, {"gpu_util": 97, "power": 612.5, "mem_used": 20e9})])
    fake, s = make(tmp_path, clock, [gpu])
    drive(s, clock, t0 + 1000 * MS, [10 * MS])
    rows = read(tmp_path)
    util = [(t, v) for t, d, m, v in rows if m == "gpu_util"]
    ts = np.array([t for t, _ in util])
    assert len(ts) == 20 and np.all(np.diff(ts) == 50 * MS)  # every 50 ms, no burst, no gap
    for t, v in util:
        assert v == (97 if t0 + 200 * MS <= t < t0 + 400 * MS else 3)
    power = {t: v for t, d, m, v in rows if m == "power"}
    assert power[t0 + 250 * MS] == 612.5 and power[t0 + 500 * MS] == 120.0  # mW -> W
    mem = {t: v for t, d, m, v in rows if m == "mem_used"}
    assert mem[t0 + 300 * MS] == 20e9
    got = {m for _, _, m, _ in rows}
    assert set(nvml_api.FAST_METRICS) <= got
    assert fake.calls["pcie_throughput"] == 0  # 20 ms a call: never polled


def test_gpm_pairs_are_at_least_100ms_apart_and_exact_averages(tmp_path):
    clock = FakeClock(10**9)
    t0 = clock.t
    # tensor work switches on and off at times unrelated to the sampling grid
    segs = [
        (t0 + 130 * MS, t0 + 370 * MS, {"sm_active": 90.0, "tensor_active": 60.0, "pcie_rx": 5e9}),
        (t0 + 610 * MS, t0 + 640 * MS, {"sm_active": 40.0}),
    ]
    fake, s = make(tmp_path, clock, [FakeGpu(segments=segs)], gpm_interval_ms=20)  # asks for less than 100
    drive(s, clock, t0 + 2000 * MS, [30 * MS, 7 * MS, 41 * MS, 13 * MS])
    pairs = fake.gpm_pairs
    assert len(pairs) >= 12
    assert all(t2 - t1 >= 100 * MS for _, t1, t2 in pairs)  # the floor holds whatever the ticks
    rows = read(tmp_path)
    gpm = {(t, m): v for t, d, m, v in rows if m in nvml_api.GPM_METRICS}
    gpu = fake.gpus[0]
    for _, t1, t2 in pairs:
        mid = (t1 + t2) // 2
        for m in ("sm_active", "tensor_active", "pcie_rx"):
            assert gpm[(mid, m)] == pytest.approx(gpu.average(m, t1, t2), rel=1e-9)
    assert len({t for t, _ in gpm}) == len(pairs)  # one value per pair, stamped at its middle


def test_gpm_unsupported_gpu_keeps_cheap_metrics_and_says_why(tmp_path):
    clock = FakeClock()
    fake, s = make(tmp_path, clock, [FakeGpu(name="Tesla T4", gpm=False, cc=(7, 5))])
    drive(s, clock, clock.t + 500 * MS, [10 * MS])
    rows = read(tmp_path)
    assert {m for _, _, m, _ in rows} == set(nvml_api.FAST_METRICS)
    un = s.unavailable()
    assert set(un) == set(nvml_api.GPM_METRICS)
    assert "Tesla T4" in un["sm_active"] and "Hopper" in un["sm_active"]
    assert fake.calls["gpm"] == 0


def test_unsupported_and_failing_readings(tmp_path):
    clock = FakeClock()
    gpu = FakeGpu(unsupported={"power", "nvlink_tx", "nvlink_rx"})
    gpu.fail_next["temperature"] = 3  # passing faults: retried, not given up
    gpu.fail_next["sm_clock"] = 10**6  # a reading that keeps failing is given up after a while
    fake, s = make(tmp_path, clock, [gpu])
    drive(s, clock, clock.t + 5000 * MS, [10 * MS])
    rows = read(tmp_path)
    got = {m for _, _, m, _ in rows}
    assert "power" not in got and "nvlink_tx" not in got and "sm_clock" not in got
    assert {"temperature", "gpu_util", "sm_active", "pcie_tx"} <= got
    un = s.unavailable()
    assert un["power"] == "Not Supported" and un["nvlink_rx"] == "Not Supported"
    assert "in a row" in un["sm_clock"]
    assert "temperature" not in un
    temps = [t for t, _, m, _ in rows if m == "temperature"]
    assert len(temps) == 100 - 3  # 5 s at 50 ms, the first three readings failed
    calls_before = fake.calls["power"]
    drive(s, clock, clock.t + 500 * MS, [10 * MS])
    assert fake.calls["power"] == calls_before  # not asked again once known unsupported


def test_several_gpus_and_visible_devices(tmp_path):
    clock = FakeClock()
    gpus = [FakeGpu(uuid=f"GPU-{i}aaa", segments=[(0, 10**20, {"gpu_util": 10.0 * (i + 1)})]) for i in range(3)]
    fake = FakeNvml(clock, gpus)
    chosen, notes = nvml_api.open_gpus(fake, "2,GPU-0")
    assert [g.index for g in chosen] == [0, 1]  # CUDA ordinals as the program sees them
    assert [g.info["nvml_index"] for g in chosen] == [2, 0]
    assert chosen[0].info["sms"] == 132 and chosen[0].info["compute_capability"] == "9.0"
    assert chosen[0].info["cuda_driver"] == "13.0" and chosen[0].info["memory_bytes"] == gpus[2].memory
    w = counter_spool.SampleWriter(counter_spool.spool_path(tmp_path, 1), list(nvml_api.ALL_METRICS))
    s = Sampler(fake, chosen, w, clock=clock)
    drive(s, clock, clock.t + 200 * MS, [50 * MS])
    util = {(d, v) for _, d, m, v in read(tmp_path) if m == "gpu_util"}
    assert util == {(0, 30.0), (1, 10.0)}
    assert nvml_api.parse_visible("") == [] and nvml_api.parse_visible("-1") == []
    assert nvml_api.parse_visible("0,1,-1,2") == ["0", "1"]
    with pytest.raises(CollectorUnavailable, match="visible"):
        nvml_api.open_gpus(fake, "7")


@pytest.mark.parametrize(
    "env, match",
    [
        ({"CUDA_VISIBLE_DEVICES": ""}, "no GPU is visible"),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, "no GPU is visible"),
    ],
)
def test_precheck_hidden_gpus(env, match):
    assert match in (nvml_api.precheck(env) or "")


def test_nvml_cannot_start(tmp_path):
    clock = FakeClock()
    sys.modules["dlscope_fake_nvml"] = FakeNvml(clock, init_error=NVML_ERROR_DRIVER_NOT_LOADED)  # type: ignore
    try:
        with pytest.raises(CollectorUnavailable, match="NVML could not start: Driver Not Loaded"):
            open_sampler(tmp_path, 1, nvml_module="dlscope_fake_nvml", env={})
        sys.modules["dlscope_fake_nvml"] = FakeNvml(clock, gpus=[])  # type: ignore
        with pytest.raises(CollectorUnavailable, match="sees no GPU"):
            open_sampler(tmp_path, 1, nvml_module="dlscope_fake_nvml", env={})
    finally:
        del sys.modules["dlscope_fake_nvml"]
    with pytest.raises(CollectorUnavailable, match="nvidia-ml-py is not installed"):
        nvml_api.load("dlscope_no_such_nvml_module")


def test_close_writes_final_header_with_cpu_and_reasons(tmp_path):
    clock = FakeClock()
    fake, s = make(tmp_path, clock, [FakeGpu(gpm=False)])
    drive(s, clock, clock.t + 300 * MS, [25 * MS])
    close_sampler(tmp_path, 1, s, cpu_s=0.01, wall_s=2.0)
    import json

    h = json.loads(counter_spool.header_path(tmp_path, 1).read_text())
    assert h["final"] and h["status"] == "ok" and h["samples"] == len(read(tmp_path))
    assert h["devices"][0]["name"] == "NVIDIA H100 80GB HBM3" and h["devices"][0]["gpm"] is False
    assert set(h["unavailable"]) == set(nvml_api.GPM_METRICS)
    assert not fake.initialized  # NVML shut down


def test_torn_spool_keeps_whole_records(tmp_path):
    w = counter_spool.SampleWriter(tmp_path / "x.nvml.spool", ["a", "b"])
    for i in range(10):
        w.add(1000 + i, 0, "a" if i % 2 else "b", i * 1.5)
    w.close()
    data = (tmp_path / "x.nvml.spool").read_bytes()
    (tmp_path / "x.nvml.spool").write_bytes(data[:-5])
    t, code, v, torn = counter_spool.read_samples(tmp_path / "x.nvml.spool")
    assert torn and len(t) == 9 and list(v) == [i * 1.5 for i in range(9)]
    assert list(code % counter_spool.MAX_METRICS) == [1 if i % 2 == 0 else 0 for i in range(9)]
    assert MIB == 1 << 20
