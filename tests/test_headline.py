"""The summary's headline: the partition of wall time on a hand-made timeline, and the block in
`dlscope summary` (text and JSON) on the ResNet fixture."""

from __future__ import annotations

import json

import pytest

from dlscope.analysis.core.headline import headline
from dlscope.analysis.reports import tensor_core

from .report_helpers import US, fixture_path, imported, make_profile, open_fixture

PARTS = ("kernels_pct", "memory_pct", "data_loading_pct", "cpu_only_pct", "other_pct")


def test_partition_of_a_hand_made_step(tmp_path):
    # one 1000 us step: kernels [0,100) (tensor cores) and [150,200); copies [100,130) and [180,300);
    # the host loads data [250,600) and runs an op [550,800); nothing is recorded after 800
    steps = [dict(step=0, start_ns=0, end_ns=1000 * US, pid=1, tid=1)]
    k = [
        dict(device=0, stream=7, start_ns=0, end_ns=100 * US, name="nvjet_sm90_tst_128x128", pid=1),
        dict(device=0, stream=7, start_ns=150 * US, end_ns=200 * US, name="elementwise_kernel", pid=1),
    ]
    m = [
        dict(device=0, stream=8, start_ns=s * US, end_ns=e * US, bytes=1, copy_kind="HtoD", pid=1)
        for s, e in ((100, 130), (180, 300))
    ]
    phases = [dict(pid=1, tid=1, start_ns=250 * US, end_ns=600 * US, name="dataloader")]
    ops = [dict(pid=1, tid=1, start_ns=550 * US, end_ns=800 * US, name="aten::cat", op_id=0)]
    h = headline(make_profile(tmp_path, steps=steps, kernels=k, memcpy=m, phases=phases, ops=ops))
    assert h is not None and h.wall_ms == pytest.approx(1.0) and h.steps == 1
    assert [round(getattr(h, p), 9) for p in PARTS] == [15.0, 13.0, 30.0, 20.0, 22.0]
    assert h.gpu_util_pct == pytest.approx(28.0)
    assert h.tensor_core_pct == pytest.approx(100 * 100 / 150)


def test_no_gpu_activity_no_headline(tmp_path):
    ops = [dict(pid=1, tid=1, start_ns=0, end_ns=10 * US, name="aten::add", op_id=0)]
    assert headline(make_profile(tmp_path, ops=ops)) is None


def test_summary_shows_the_headline(cli, tmp_path_factory):
    path = imported(fixture_path("h100_resnet50_phases"), tmp_path_factory)
    r = cli("summary", path, "--format", "json")
    assert r.code == 0, r.err
    h = json.loads(r.out)["headline"]
    assert sum(h[p] for p in PARTS) == pytest.approx(100)
    assert h["gpu_util_pct"] == pytest.approx(h["kernels_pct"] + h["memory_pct"])
    assert h["steps"] == 3
    # ResNet's step is mostly CPU preprocessing with the GPU idle
    assert h["data_loading_pct"] > 50 and h["gpu_util_pct"] < 40
    tc_note = [
        n
        for n in tensor_core.compute(open_fixture("h100_resnet50_phases", tmp_path_factory)).notes
        if "tensor-core kernel utilization" in n
    ][0]
    assert f"{h['tensor_core_pct']:.1f}%" in tc_note
    text = cli("summary", path)
    assert text.code == 0 and "Headline" in text.out and "GPU utilization" in text.out


def test_the_step_where_tracing_stopped_is_not_a_step_with_gpu_data(tmp_path):
    """Sampled detail: steps 0-1 traced with kernels; step 2 is flagged traced (the tracer
    stopped in it, leaving one cudaDeviceSynchronize) but holds no ops or kernels; steps 3-5
    untraced. The headline and per-step GPU figures cover steps 0-1 only."""
    steps = [
        dict(step=i, start_ns=i * 1000 * US, end_ns=(i + 1) * 1000 * US, pid=1, tid=1, traced=i <= 2) for i in range(6)
    ]
    k = [
        dict(
            device=0,
            stream=7,
            start_ns=(i * 1000 + 100) * US,
            end_ns=(i * 1000 + 600) * US,
            name="elementwise_kernel",
            pid=1,
            correlation_id=i + 1,
        )
        for i in range(2)
    ]
    api = [
        dict(
            pid=1,
            tid=1,
            start_ns=(i * 1000 + 50) * US,
            end_ns=(i * 1000 + 60) * US,
            name="cudaLaunchKernel",
            correlation_id=i + 1,
        )
        for i in range(2)
    ]
    api.append(
        dict(pid=1, tid=1, start_ns=2000 * US, end_ns=2001 * US, name="cudaDeviceSynchronize", correlation_id=99)
    )
    data = make_profile(tmp_path, steps=steps, kernels=k, api=api)
    assert [r["step"] for r in data.rows("SELECT step FROM detail_steps ORDER BY step")] == [0, 1]
    h = headline(data)
    assert h is not None and h.steps == 2 and h.wall_ms == pytest.approx(2.0)
    assert h.kernels_pct == pytest.approx(50.0) and h.gpu_util_pct == pytest.approx(50.0)
