"""`dlscope diff` on real before/after pairs: the H100 GPT-6 traces in fp32 and under bf16
autocast (a real optimization), HTA's trace_compare and trace_diff pairs, and the ResNet-50
trace against itself (no optimized ResNet-50 trace exists among the fixtures)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dlscope.analysis.compare.decompose import _gpu_parts
from dlscope.analysis.compare.diff import compare
from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.application.diff import diff
from dlscope.importers.run import import_files

from .conftest import CORPUS, DATA, need_file

FP32 = DATA / "kineto" / "h100_gpt6_fp32.trace.json.gz"
BF16 = DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz"


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpt")
    a = ProfileData.open(import_files([FP32], d / "fp32.dlscope"))
    b = ProfileData.open(import_files([BF16], d / "bf16.dlscope"))
    return a, b, diff(a, b)  # the use case: the measured diff and the advice compared


def _steps(profile: Path, only: tuple[int, int] | None = None):
    t = pq.read_table(profile / "steps.parquet")
    if only is not None:
        keep = [only[0] <= s <= only[1] for s in t.column("step").to_pylist()]
        t = t.filter(keep)
    return t


def _mean_step_ms(profile: Path, only: tuple[int, int] | None = None) -> float:
    """Mean step duration read straight from the Parquet file (no dlscope analysis code)."""
    t = _steps(profile, only)
    d = np.array(t.column("end_ns").to_pylist()) - np.array(t.column("start_ns").to_pylist())
    return float(d.mean()) / 1e6


def _busy_ms_per_step(profile: Path, only: tuple[int, int] | None = None) -> float:
    """GPU busy time inside each step (union of kernels, copies and sets), mean over steps, from
    the Parquet files with numpy."""
    steps = _steps(profile, only)
    iv = []
    for t in ("kernels", "memcpy", "memset"):
        tab = pq.read_table(profile / f"{t}.parquet")
        iv += list(zip(tab.column("start_ns").to_pylist(), tab.column("end_ns").to_pylist()))
    iv.sort()
    merged: list[list[int]] = []
    for s, e in iv:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    total = 0
    for s0, e0 in zip(steps.column("start_ns").to_pylist(), steps.column("end_ns").to_pylist()):
        total += sum(max(0, min(e, e0) - max(s, s0)) for s, e in merged)
    return total / 1e6 / steps.num_rows


def _json_kernel_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel"}


def test_rows_add_up_to_the_step_time_change(gpt):
    a, b, d = gpt
    total = _mean_step_ms(b.path) - _mean_step_ms(a.path)
    assert d.total_delta_ms == pytest.approx(total, rel=1e-9)
    rows = sum(c.delta for c in d.explain)
    assert abs(rows - total) <= 0.05 * abs(total)  # the acceptance bound; it holds exactly by construction
    assert rows == pytest.approx(total, rel=1e-9)
    assert sum(c.share_pct for c in d.explain) == pytest.approx(100.0)
    assert [abs(c.delta) for c in d.explain] == sorted((abs(c.delta) for c in d.explain), reverse=True)


@pytest.mark.parametrize("side", [0, 1])
def test_gpu_busy_rows_equal_the_union_of_gpu_work(gpt, side):
    data = gpt[side]
    dec = gpt[2].decomposition_a if side == 0 else gpt[2].decomposition_b
    busy = sum(p.ms for p in dec.parts if p.kind != "idle" and not p.key.startswith("other:not"))
    assert busy == pytest.approx(_busy_ms_per_step(data.path), rel=1e-6)
    assert sum(p.ms for p in dec.parts) == pytest.approx(_mean_step_ms(data.path), rel=1e-9)


@pytest.mark.parametrize("side", [0, 1])
def test_all_traced_steps_are_decomposed_as_traced(gpt, side):
    """Every step of a Kineto trace is traced: no calibration to untraced steps, the idle rows are
    the traced steps' own (step time minus busy time, from numpy), the parts are the windows' parts
    as they are, and no residual row (each step is a window)."""
    data = gpt[side]
    dec = gpt[2].decomposition_a if side == 0 else gpt[2].decomposition_b
    assert not data.traced_excluded and dec.idle_scale is None
    idle = sum(p.ms for p in dec.parts if p.kind == "idle")
    assert idle == pytest.approx(_mean_step_ms(data.path) - _busy_ms_per_step(data.path), rel=1e-6)
    assert idle > 1.0
    again = _gpu_parts(data)[0]  # a second computation: parallel float sums may differ in the last bit
    assert [p.key for p in dec.parts] == [p.key for p in again]
    assert [p.ms for p in dec.parts] == pytest.approx([p.ms for p in again], rel=1e-9, abs=1e-12)
    assert all(not p.key.startswith("other:not") for p in dec.parts)


def test_fp32_gemms_vanish_and_tensor_core_gemms_appear(gpt):
    _, _, d = gpt
    fp32, bf16 = _json_kernel_names(FP32), _json_kernel_names(BF16)
    vanished = {c.name for c in d.kernels if c.status == "vanished"}
    new = {c.name for c in d.kernels if c.status == "new"}
    assert vanished == fp32 - bf16
    assert new == bf16 - fp32
    assert any("f32f32" in n and "ffma" in n for n in vanished)  # fp32 GEMMs on CUDA cores
    # the replacement is found through the launching op: aten::mm lost its fp32 kernels, got new ones
    mm = next(x for x in d.op_links if x.op == "aten::mm")
    assert any("f32" in n for n, _ in mm.vanished) and mm.new
    assert mm.b_ms < mm.a_ms / 5
    # largest rows first: the GEMMs that vanished are at the top of the kernel table
    assert d.kernels[0].status == "vanished"
    gpu = {r["metric"]: r for r in d.gpu["rows"]}
    assert gpu["tensor_core_pct"]["b"] > gpu["tensor_core_pct"]["a"]
    resolved = {f["id"] for f in d.advice["resolved"]}
    assert {"no_tensor_cores", "amp_not_enabled"} <= resolved
    # names matched: few kernels share names across precisions, and the diff says so
    assert any(n.startswith("gpu: only") for n in d.notes)


def test_two_steps_are_too_few_to_call_significant(gpt):
    _, _, d = gpt
    p50 = d.shift("p50")
    assert p50.delta < 0 and not p50.significant and "too few steps" in p50.why


def test_hta_trace_compare_new_ops_are_listed(tmp_path):
    base = need_file(CORPUS / "trace_compare" / "base")
    test = need_file(CORPUS / "trace_compare" / "test")
    a = ProfileData.open(import_files([base], tmp_path / "a.dlscope"))
    b = ProfileData.open(import_files([test], tmp_path / "b.dlscope"))
    d = compare(a, b)

    def ops(folder: Path) -> set[str]:
        f = next(folder.glob("*.json.gz"))
        with gzip.open(f, "rt") as fh:
            return {e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "cpu_op"}

    only_test = ops(test) - ops(base)
    assert only_test
    assert {c.name for c in d.ops if c.status == "new"} == only_test
    assert sum(c.delta for c in d.explain) == pytest.approx(d.total_delta_ms, abs=1e-9)


def _profiler_steps_ms(folder: Path) -> list[float]:
    f = next(folder.glob("*.json.gz"))
    with gzip.open(f, "rt") as fh:
        ev = json.load(fh)["traceEvents"]
    return [
        e["dur"] / 1e3
        for e in sorted(ev, key=lambda e: e.get("ts", 0))
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]


def test_hta_trace_diff_regression_is_significant(tmp_path):
    stats = pytest.importorskip("scipy.stats")
    control = need_file(CORPUS / "trace_diff" / "control")
    test = need_file(CORPUS / "trace_diff" / "test")
    a = ProfileData.open(import_files([control], tmp_path / "a.dlscope"))
    b = ProfileData.open(import_files([test], tmp_path / "b.dlscope"))
    d = compare(a, b)
    sa, sb = _profiler_steps_ms(control), _profiler_steps_ms(test)
    assert d.samples_a == pytest.approx(sa, rel=1e-6) and d.samples_b == pytest.approx(sb, rel=1e-6)
    p50 = d.shift("p50")
    assert p50.p_value == pytest.approx(stats.mannwhitneyu(sa, sb, alternative="two-sided").pvalue, rel=1e-9)
    assert p50.significant and p50.delta == pytest.approx(np.median(sb) - np.median(sa), rel=1e-6)
    rows = sum(c.delta for c in d.explain)
    assert rows == pytest.approx(np.mean(sb) - np.mean(sa), rel=1e-6)


def test_resnet_first_step_against_the_next_two(resnet_profile):
    """A real change inside one trace: step 2 (145 ms) against steps 3-4 (130 and 120 ms)."""
    a = ProfileData.open(resnet_profile, Selection(iter_start=2, iter_stop=2))
    b = ProfileData.open(resnet_profile, Selection(iter_start=3, iter_stop=4))
    d = compare(a, b)
    total = _mean_step_ms(resnet_profile, (3, 4)) - _mean_step_ms(resnet_profile, (2, 2))
    assert total < -10
    assert d.total_delta_ms == pytest.approx(total, rel=1e-9)
    assert sum(c.delta for c in d.explain) == pytest.approx(total, rel=1e-9)
    for dec, only in ((d.decomposition_a, (2, 2)), (d.decomposition_b, (3, 4))):
        busy = sum(p.ms for p in dec.parts if p.kind != "idle" and not p.key.startswith("other:not"))
        assert busy == pytest.approx(_busy_ms_per_step(resnet_profile, only), rel=1e-6)
    # the phases that changed are the ones the rows say: input loading dominates the idle change
    idle_input = next(c for c in d.explain if c.name.startswith("GPU idle: host loading"))
    phase = {c.name: c for c in d.phases}
    assert phase["preprocess"].delta == pytest.approx(idle_input.delta, abs=3.0)


def test_resnet_against_itself_changes_nothing(resnet_profile):
    a, b = ProfileData.open(resnet_profile), ProfileData.open(resnet_profile)
    d = compare(a, b)
    assert d.total_delta_ms == 0
    assert all(c.delta == pytest.approx(0, abs=1e-9) and c.status == "matched" for c in d.explain + d.kernels)
    assert not any(s.significant for s in d.shifts)
    assert all(m.new == 0 and m.vanished == 0 for m in d.matching)
