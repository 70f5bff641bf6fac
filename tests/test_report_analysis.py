"""The numbers behind the HTML report, checked against plain Python / numpy on the real traces:
GPU busy over time, counters per bin, phases per step, top kernels and ops, tensor-core share."""

from __future__ import annotations

import csv
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.step_phases import step_durations, step_phases
from dlscope.analysis.core.tensor_core_kernels import is_tensor_core_kernel, tensor_core_share
from dlscope.analysis.core.timeseries import counters_binned, gpu_busy, phase_bands, time_bins
from dlscope.analysis.core.top import top_kernels, top_ops
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta

from . import kineto_tables
from .conftest import DATA, KINETO, RESNET_TRACE

NVML_CSV = DATA / "gpu" / "h100_nvml_resnet50.csv"


def nvml_counters(rank: int = 0, device: int = 0) -> pa.Table:
    """The NVML samples of the fixture as counter rows, in the schema's units (W, bytes, %)."""
    with open(NVML_CSV) as f:
        rows = list(csv.DictReader(f))
    metrics = {
        "gpu_util": ("gpu_util", 1.0),
        "mem_util": ("mem_util", 1.0),
        "mem_used": ("mem_used_bytes", 1.0),
        "power": ("power_mw", 1e-3),
        "sm_clock": ("sm_clock_mhz", 1.0),
        "temperature": ("temp_c", 1.0),
    }
    out: dict[str, list] = {"rank": [], "device": [], "ts_ns": [], "metric": [], "value": []}
    for r in rows:
        for metric, (col, scale) in metrics.items():
            out["rank"].append(rank)
            out["device"].append(device)
            out["ts_ns"].append(int(r["t_ns"]))
            out["metric"].append(metric)
            out["value"].append(float(r[col]) * scale)
    return pa.table(out)


@pytest.fixture(scope="module")
def nvml_profile(tmp_path_factory):
    b = ProfileBuilder()
    b.add("counters", nvml_counters())
    path = tmp_path_factory.mktemp("nvml") / "nvml.dlscope"
    b.write(path, Meta(source="test:nvml-csv", devices=[{"rank": 0, "index": 0, "name": "NVIDIA H100 80GB HBM3"}]))
    return path


def test_gpu_busy_is_the_union_of_gpu_intervals_per_bin(resnet_profile):
    data = ProfileData.open(resnet_profile)
    bins = time_bins(data, 150)
    got = gpu_busy(data, bins).column("busy_pct").to_numpy()
    # independent: mark every GPU interval on a ns-resolution boolean timeline per bin
    tables, _ = kineto_tables.tables(RESNET_TRACE)
    ivs = sorted(
        (s, e)
        for t in ("kernels", "memcpy", "memset")
        for s, e in zip(tables[t].column("start_ns").to_pylist(), tables[t].column("end_ns").to_pylist())
    )
    merged: list[list[int]] = []
    for s, e in ivs:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    want = np.zeros(bins.count)
    for s, e in merged:
        for b in range(bins.count):
            lo, hi = bins.start_ns + b * bins.width_ns, bins.start_ns + (b + 1) * bins.width_ns
            want[b] += max(0, min(e, hi) - max(s, lo))
    want = 100 * want / bins.width_ns
    assert len(got) == bins.count
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert 0 < got.mean() < 100 and got.max() <= 100 + 1e-9


def test_counters_binned_are_the_mean_of_their_samples(nvml_profile):
    data = ProfileData.open(nvml_profile)
    bins = time_bins(data, 50)
    got = [r for r in counters_binned(data, bins).to_pylist() if r["metric"] == "power"]
    with open(NVML_CSV) as f:
        samples = [(int(r["t_ns"]), float(r["power_mw"]) / 1000) for r in csv.DictReader(f)]
    by_bin = defaultdict(list)
    for t, v in samples:
        by_bin[(t - bins.start_ns) // bins.width_ns].append(v)
    assert {r["bin"] for r in got} == set(by_bin)
    for r in got:
        assert r["mean"] == pytest.approx(np.mean(by_bin[r["bin"]]))
        assert r["max"] == pytest.approx(max(by_bin[r["bin"]]))


def test_steps_split_into_phases_add_up(resnet_profile):
    data = ProfileData.open(resnet_profile)
    durations = {r["step"]: r["duration_ns"] for r in step_durations(data).to_pylist()}
    assert sorted(durations) == [2, 3, 4]
    parts = defaultdict(dict)
    for r in step_phases(data).to_pylist():
        parts[r["step"]][r["phase"]] = r["ns"]
    events, _ = kineto_tables.load_events(RESNET_TRACE)
    pre = sorted(
        kineto_tables.ns(e["dur"]) for e in events if e.get("cat") == "user_annotation" and e["name"] == "preprocess"
    )
    assert sorted(p["preprocess"] for p in parts.values()) == pre
    for step, p in parts.items():
        assert set(p) == {"preprocess", "train_step", "postprocess", None}  # nested phases are not outermost
        assert sum(p.values()) == durations[step]
    bands = phase_bands(data, time_bins(data))
    assert bands.column("name").to_pylist() == ["preprocess", "train_step", "postprocess"] * 3


def test_top_kernels_and_ops_match_the_trace(resnet_profile):
    data = ProfileData.open(resnet_profile)
    events, _ = kineto_tables.load_events(RESNET_TRACE)
    kernel_ns: dict[str, int] = defaultdict(int)
    for e in events:
        if e.get("cat") == "kernel":
            kernel_ns[e["name"]] += kineto_tables.ns(e["dur"])
    top = top_kernels(data, 5).to_pylist()
    want = sorted(kernel_ns.items(), key=lambda kv: -kv[1])[:5]
    assert [(r["name"], r["total_ns"]) for r in top] == want
    assert top[0]["pct"] == pytest.approx(100 * want[0][1] / sum(kernel_ns.values()))
    ops = top_ops(data, 3).to_pylist()
    assert ops[0]["name"] == "aten::convolution_backward" and ops[0]["count"] == 159
    # self time: a parent's time minus its children's, so self times add up to the top-level time
    total_self = data.scalar("SELECT sum(self_ns)::BIGINT FROM ops")
    top_level = data.scalar("SELECT sum(end_ns - start_ns)::BIGINT FROM ops WHERE depth = 0")
    assert total_self == top_level


# fp32: the GEMMs run on CUDA cores; only the memory-efficient attention kernels (3xTF32 on sm80+)
# use tensor cores, about a tenth of kernel time. bf16: the GEMMs do too.
@pytest.mark.parametrize("trace, low, high", [("h100_gpt6_fp32", 5.0, 15.0), ("h100_gpt6_bf16", 20.0, 60.0)])
def test_tensor_core_share_tells_fp32_from_bf16(tmp_path, trace, low, high):
    path = KINETO / f"{trace}.trace.json.gz"
    data = ProfileData.open(kineto_tables.build_profile(path, tmp_path / "p.dlscope"))
    tc = tensor_core_share(data)
    events, _ = kineto_tables.load_events(path)
    kernels = [(e["name"], kineto_tables.ns(e["dur"])) for e in events if e.get("cat") == "kernel"]
    assert tc.kernel_ns == sum(d for _, d in kernels)
    assert tc.tensor_ns == sum(d for n, d in kernels if is_tensor_core_kernel(n))
    assert low <= tc.pct <= high
    if trace.endswith("fp32"):
        # its GEMMs: sm80_xmma ..._ffma and CUTLASS simt sgemm, both on CUDA cores
        assert any("ffma" in n for n, _ in kernels) and any("simt_sgemm" in n for n, _ in kernels)
        assert all("fmha" in n for n, _, _ in tc.kernels)
    else:
        names = [n for n, _, _ in tc.kernels]
        assert any(n.startswith("nvjet_sm90") for n in names) and any("wgmma" in n for n in names)
        assert not any("elementwise" in n for n in names)


def test_tensor_core_names():
    assert is_tensor_core_kernel("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4>")
    assert is_tensor_core_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32")
    assert is_tensor_core_kernel("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn")
    assert is_tensor_core_kernel("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>")
    assert not is_tensor_core_kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_ffma")
    assert not is_tensor_core_kernel("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>")
    assert not is_tensor_core_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor>")
