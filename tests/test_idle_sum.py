"""idle_sum: each rule on a hand-made timeline, and the ResNet fixture (CPU preprocess phase,
pageable copies, .item() syncs) checked against a plain-Python interval computation."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dlscope.analysis.reports import gpu_time_breakdown, idle_sum

from . import kineto_reference as ref
from .report_helpers import US, fixture_path, make_profile, open_fixture


def _timeline(tmp_path):
    """GPU busy [100,200) [300,400) [500,600) [800,900) [950,960) us; the gaps and what the host
    (pid 1) did in them:
      [200,300): data_loading phase until 280 (input 80), then aten::mm (launch 20)
      [400,500): in cudaStreamSynchronize until 420, next launch at 470 (sync 70), launch call
                 [470,480) (launch 10), nothing (other 20)
      [600,800): aten::add [650,700) (launch 50), nothing else (other 150); a DataLoader worker
                 (pid 2) loading data meanwhile does not count
      [900,950): preprocess phase and an op at once (input 50: input wins)
      [960,980): data_loading again, but k5 (launched at [905,910)) was queued before the gap
                 began: a GPU-side gap (other 20)"""
    k = [
        dict(device=0, stream=7, start_ns=s * US, end_ns=e * US, name=f"k{i}", correlation_id=i + 1, pid=1)
        for i, (s, e) in enumerate(((100, 200), (300, 400), (500, 600), (800, 900), (950, 960), (980, 990)))
    ]
    launches = ((50, 60), (285, 290), (470, 480), (660, 665), (905, 910), (906, 908))
    api = [
        dict(pid=1, tid=1, start_ns=s * US, end_ns=e * US, name="cudaLaunchKernel", correlation_id=i + 1)
        for i, (s, e) in enumerate(launches)
    ]
    api.append(dict(pid=1, tid=1, start_ns=350 * US, end_ns=420 * US, name="cudaStreamSynchronize", correlation_id=99))
    ops = [
        dict(pid=1, tid=1, start_ns=280 * US, end_ns=310 * US, name="aten::mm", op_id=0),
        dict(pid=1, tid=1, start_ns=650 * US, end_ns=700 * US, name="aten::add", op_id=1),
        dict(pid=1, tid=1, start_ns=890 * US, end_ns=960 * US, name="aten::relu", op_id=2),
    ]
    phases = [
        dict(pid=1, tid=1, start_ns=190 * US, end_ns=280 * US, name="data_loading"),
        dict(pid=2, tid=5, start_ns=600 * US, end_ns=800 * US, name="data_loading"),
        dict(pid=1, tid=1, start_ns=880 * US, end_ns=990 * US, name="preprocess"),
        dict(pid=1, tid=1, start_ns=955 * US, end_ns=985 * US, name="data_loading"),
    ]
    steps = [dict(step=0, start_ns=0, end_ns=1000 * US, pid=1, tid=1)]
    return make_profile(tmp_path, kernels=k, api=api, ops=ops, phases=phases, steps=steps)


def test_rules_on_a_hand_made_timeline(tmp_path):
    data = _timeline(tmp_path)
    r = idle_sum.compute(data)
    rows = {x["cause"]: x for x in r.table.to_pylist()}
    assert list(rows) == ["input", "sync", "launch", "other"]
    assert {c: round(x["idle_ms"] * 1000, 6) for c, x in rows.items()} == {
        "input": 130,
        "sync": 70,
        "launch": 80,
        "other": 190,
    }
    assert {c: x["gaps"] for c, x in rows.items()} == {"input": 2, "sync": 1, "launch": 0, "other": 2}
    assert rows["input"]["idle_pct"] == pytest.approx(100 * 130 / 470)
    assert rows["other"]["span_pct"] == pytest.approx(100 * 190 / 890)
    assert rows["sync"]["per_step_ms"] == pytest.approx(0.070)
    # the idle total is gpu_time_breakdown's
    assert sum(x["idle_ms"] for x in rows.values()) == pytest.approx(
        gpu_time_breakdown.compute(data).table.to_pylist()[0]["idle_ms"]
    )


def test_without_phases_or_runtime_calls_says_what_cannot_be_told(tmp_path):
    k = [
        dict(device=0, stream=7, start_ns=0, end_ns=10 * US, name="a"),
        dict(device=0, stream=7, start_ns=20 * US, end_ns=30 * US, name="b"),
    ]
    r = idle_sum.compute(make_profile(tmp_path, kernels=k))
    rows = {x["cause"]: x for x in r.table.to_pylist()}
    assert rows["other"]["idle_ms"] == pytest.approx(0.010) and rows["input"]["idle_ms"] == 0
    assert any("data loading cannot be told apart" in n for n in r.notes)
    assert any("syncs cannot be told apart" in n for n in r.notes)


def test_resnet_idle_is_mostly_waiting_for_the_preprocess_phase(tmp_path_factory):
    doc = ref.load(fixture_path("h100_resnet50_phases"))

    def span(e):
        s = ref.ns(doc, e["ts"])
        return s, s + int(Decimal(e["dur"]) * 1000)

    busy = ref.merge_intervals([span(e) for c in ("kernel", "gpu_memcpy", "gpu_memset") for e in ref.events(doc, c)])
    gaps = [(a[1], b[0]) for a, b in zip(busy, busy[1:])]
    pre = ref.merge_intervals([span(e) for e in ref.events(doc, "user_annotation") if e["name"] == "preprocess"])
    input_ns = sum(max(0, min(ge, pe) - max(gs, ps)) for gs, ge in gaps for ps, pe in pre)

    rows = {
        x["cause"]: x
        for x in idle_sum.compute(open_fixture("h100_resnet50_phases", tmp_path_factory)).table.to_pylist()
    }
    assert rows["input"]["idle_ms"] == pytest.approx(input_ns / 1e6, abs=1e-6)
    assert sum(x["idle_ms"] for x in rows.values()) == pytest.approx(sum(e - s for s, e in gaps) / 1e6, abs=1e-6)
    # waiting for input is most of it; each of the 3 steps' .item() sync leaves one gap; launching
    # is most of the rest, and most gaps are short GPU-side ones with the next kernel queued
    assert rows["input"]["idle_pct"] > 80
    assert rows["sync"]["gaps"] == 3 and rows["sync"]["idle_ms"] > 0
    assert rows["launch"]["idle_ms"] > rows["other"]["idle_ms"]
    assert rows["other"]["gaps"] > rows["launch"]["gaps"]
