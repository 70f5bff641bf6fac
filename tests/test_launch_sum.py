"""launch_sum against numpy over the Kineto JSON of the ResNet fixture."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

import numpy as np
import pytest

from dlscope.analysis.reports import launch_sum

from . import kineto_reference as ref
from .report_helpers import US, fixture_path, make_profile, open_fixture


def test_launch_statistics_equal_numpy(tmp_path_factory):
    doc = ref.load(fixture_path("h100_resnet50_phases"))
    steps = ref.profiler_steps(doc)

    def ns(e):
        return ref.ns(doc, e["ts"])

    def dur(e):
        return int(Decimal(e["dur"]) * 1000)

    calls = [
        e
        for c in ("cuda_runtime", "cuda_driver")
        for e in ref.events(doc, c)
        if any(s <= ns(e) < t for _, s, t in steps)
    ]
    gpu = {e["args"]["correlation"]: (c, e) for c in ("kernel", "gpu_memcpy", "gpu_memset") for e in ref.events(doc, c)}
    launch_calls = [e for e in calls if e["args"].get("correlation") in gpu or "launch" in e["name"].lower()]
    threshold = np.median(
        [
            dur(e)
            for e in launch_calls
            if "launch" in e["name"].lower() and gpu.get(e["args"]["correlation"], ("",))[0] == "kernel"
        ]
    )
    by_name = defaultdict(list)
    for e in launch_calls:
        by_name[e["name"]].append(e)

    r = launch_sum.compute(open_fixture("h100_resnet50_phases", tmp_path_factory))
    rows = {x["name"]: x for x in r.table.to_pylist()}
    assert set(rows) == set(by_name) | {"all"}
    assert r.table.column("name")[-1].as_py() == "all"
    for name, evs in list(by_name.items()) + [("all", launch_calls)]:
        row = rows[name]
        d = np.array([dur(e) for e in evs], dtype=float)
        assert row["calls"] == len(evs)
        assert row["total_ms"] == pytest.approx(d.sum() / 1e6)
        assert row["p50_ms"] == pytest.approx(np.percentile(d, 50) / 1e6)
        assert row["p95_ms"] == pytest.approx(np.percentile(d, 95) / 1e6)
        items = [(gpu[e["args"]["correlation"]], e) for e in evs if e["args"].get("correlation") in gpu]
        delay = np.array([ns(g) - ns(e) for (_, g), e in items], dtype=float)
        assert row["gpu_items"] == len(items)
        assert row["delay_p50_ms"] == pytest.approx(np.percentile(delay, 50) / 1e6)
        assert row["delay_p95_ms"] == pytest.approx(np.percentile(delay, 95) / 1e6)
        assert row["delay_max_ms"] == pytest.approx(delay.max() / 1e6)
        kd = np.array([dur(g) for (c, g), _ in items if c == "kernel"], dtype=float)
        assert row["kernels"] == len(kd)
        assert row["kernels_per_step"] == pytest.approx(len(kd) / len(steps))
        assert row["small_kernels"] == int((kd < threshold).sum())
        if len(kd):
            assert row["small_kernel_time_pct"] == pytest.approx(100 * kd[kd < threshold].sum() / kd.sum())
    assert any(f"shorter than {threshold / 1000:.1f} us" in n for n in r.notes)


def test_threshold_defaults_without_launch_calls(tmp_path):
    # a copy launched by cudaMemcpyAsync, and a kernel whose launch call was not recorded
    api = [dict(pid=1, tid=1, start_ns=0, end_ns=3 * US, name="cudaMemcpyAsync", correlation_id=1)]
    m = [dict(device=0, stream=7, start_ns=10 * US, end_ns=20 * US, bytes=64, copy_kind="HtoD", correlation_id=1)]
    k = [dict(device=0, stream=7, start_ns=30 * US, end_ns=32 * US, name="tiny")]
    r = launch_sum.compute(make_profile(tmp_path, api=api, memcpy=m, kernels=k))
    rows = {x["name"]: x for x in r.table.to_pylist()}
    assert rows["cudaMemcpyAsync"]["gpu_items"] == 1 and rows["cudaMemcpyAsync"]["kernels"] == 0
    assert rows["cudaMemcpyAsync"]["delay_p50_ms"] == pytest.approx(0.010)
    assert rows["all"]["small_kernel_pct"] is None  # no kernel was launched by a recorded call
    assert any("5 us default" in n for n in r.notes)
