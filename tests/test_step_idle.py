"""step_idle: per step GPU idle by cause and host waits, on a hand-made timeline (every number
known) and on the ResNet fixture against plain Python over the JSON."""

from __future__ import annotations

from decimal import Decimal

import pytest

from dlscope.analysis.core.step_idle import step_idle

from . import kineto_reference as ref
from .advice_helpers import SGEMM, Loop
from .report_helpers import fixture_path, open_fixture


def test_causes_and_waits_on_a_hand_made_step(tmp_path):
    """Step [0, 100) ms, GPU busy [40.1, 60) [70.1, 80) [85, 90) [95.5, 96). Idle, by cause:
    [0, 30) loading: input 30; [30, 40) an op, [40, 40.01) the launch call: launch 10.01, then
    nothing until the kernel starts: other 0.09; [60, 70) after a sync [41, 60), until the next
    launch call at 70: sync 10; [70, 70.1) two launch calls of 10 us: launch 0.02, other 0.08;
    [80, 85) the next kernel was launched at 70.05: queued 5; [90, 95) other 5; [95, 95.5) and
    [96, 97) inside a pageable copy call: launch 1.5; [97, 100) other 3. Host waits: the sync
    (19) and the pageable copy call (2). A traced step with no GPU work at all is left out."""
    lp = Loop()
    lp.step(0, 0, 100)
    lp.step(1, 100, 200)
    lp.tables["steps"][1]["traced"] = True
    lp.phase("data_loading", 0, 30)
    lp.op("aten::mm", 30, 40, 1)
    lp.kernel(SGEMM, 40, 40.1, 60)
    lp.call("cudaStreamSynchronize", 41, 60)
    lp.kernel(SGEMM, 70, 70.1, 80)
    lp.kernel(SGEMM, 70.05, 85, 90)
    lp.copy("DtoH", "device", 95, 97, 95.5, 96)
    lp.tables["memcpy"][0]["dst_kind"] = "pageable"
    rows = step_idle(lp.open(tmp_path)).to_pylist()
    assert [r["step"] for r in rows] == [0]
    ms = {k: v / 1e6 for k, v in rows[0].items() if k.endswith("_ns") and k not in ("start_ns", "end_ns")}
    assert ms == pytest.approx(
        {
            "window_ns": 100,
            "busy_ns": 19.9 + 9.9 + 5 + 0.5,
            "queued_ns": 5,
            "input_ns": 30,
            "sync_ns": 10,
            "launch_ns": 10.01 + 0.02 + 1.5,
            "other_ns": 0.09 + 0.08 + 5 + 3,
            "wait_ns": 19 + 2,
            "sync_wait_ns": 19,
            "pageable_wait_ns": 2,
        },
        abs=1e-6,
    )


def test_resnet_idle_under_preprocess_and_sync_waits_match_the_json(tmp_path_factory):
    data = open_fixture("h100_resnet50_phases", tmp_path_factory)
    rows = {r["step"]: r for r in step_idle(data).to_pylist()}
    doc = ref.load(fixture_path("h100_resnet50_phases"))
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def span(e):
        s = ref.ns(doc, e["ts"])
        return s, s + int(Decimal(e["dur"]) * 1000)

    busy = sorted(span(e) for e in x if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    for n, s, e in ref.profiler_steps(doc):
        cut = [(max(a, s), min(b, e)) for a, b in busy if a < e and b > s]
        merged: list[list[int]] = []
        for a, b in sorted(cut):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        assert rows[n]["busy_ns"] == sum(b - a for a, b in merged)
        syncs = [span(c) for c in x if c.get("cat") == "cuda_runtime" and c["name"].endswith("Synchronize")]
        assert rows[n]["sync_wait_ns"] == sum(max(0, min(b, e) - max(a, s)) for a, b in syncs)
