"""Every registered rule fires on a real profile that has its problem and stays silent on one that runs it
and does not (issue 37: "each registered rule has a test where it fires and one where it stays silent").

The profiles are the stored real ones of tests/data. Three problems no stored profile has (a memory peak near
the GPU's capacity, a throttled GPU, kernels Nsight Compute found at their peak) are made from a real profile
with one fact changed, and the test checks the finding's figures against that fact, computed here from the
Parquet files. A rule added to the registry without both cases fails :func:`test_every_rule_has_both_cases`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dlscope import advice
from dlscope.analysis.core.context import ProfileData

DATA = Path(__file__).parent / "data"
CNN = "advice_truth/cnn_baseline_default.dlscope"
GPT = "advice_truth/gpt_baseline_default.dlscope"
NCU = "gpu_h100/torch_ncu.dlscope"
DDP = "advice_truth_dist/ddp2_balanced_a.dlscope"


def _strings(profile: Path) -> dict[int, str]:
    return {r["id"]: r["value"] for r in pq.read_table(profile / "strings.parquet").to_pylist()}


def _metric_ids(profile: Path, names: set[str]) -> dict[str, int]:
    return {v: k for k, v in _strings(profile).items() if v in names}


def memory_near_limit_variant(src: Path, dst: Path) -> None:
    """The CNN's GPU with just 5% more memory than the program's peak: meta.json's capacity changed."""
    peak = _selected_peak(src, "mem_used")
    meta = json.loads((dst / "meta.json").read_text())
    for d in meta["devices"]:
        d["memory_bytes"] = int(peak / 0.95)
    (dst / "meta.json").write_text(json.dumps(meta))


def throttled_variant(src: Path, dst: Path) -> None:
    """The CNN's GPU under its software power cap (NVML reason 0x4) in every sample: the throttle reasons
    sampled changed, nothing else."""
    t = pq.read_table(src / "counters.parquet")
    reason = _metric_ids(src, {"throttle_reasons"})["throttle_reasons"]
    is_reason = pc.equal(t["metric_id"], reason)
    t = t.set_column(t.schema.get_field_index("value"), "value",
                     pc.if_else(is_reason, pa.scalar(4.0), t["value"]))
    pq.write_table(t, dst / "counters.parquet")


def at_peak_variant(src: Path, dst: Path) -> None:
    """The kernels Nsight Compute measured, each at 99% of its SM and memory throughput: nothing left to win."""
    t = pq.read_table(src / "kernel_metrics.parquet")
    ids = _metric_ids(src, {"Compute (SM) Throughput", "Memory Throughput"})
    at_peak = pc.is_in(t["metric_id"], pa.array(list(ids.values()), pa.int32()))
    t = t.set_column(t.schema.get_field_index("value"), "value", pc.if_else(at_peak, pa.scalar(99.0), t["value"]))
    pq.write_table(t, dst / "kernel_metrics.parquet")


Variant = tuple[str, Callable[[Path, Path], None]]
Case = str | Variant

# rule -> (a profile where it fires, one where it runs and finds nothing)
CASES: dict[str, tuple[Case, Case]] = {
    "gpu_idle": (CNN, GPT),
    "input_bound": (CNN, "advice_truth/cnn_workers_default.dlscope"),
    "launch_bound": (CNN, GPT),
    "pageable_memcpy": (CNN, GPT),
    "h2d_not_overlapped": (CNN, GPT),
    "sync_in_step": (GPT, CNN),
    "no_tensor_cores": (GPT, CNN),
    "amp_not_enabled": (CNN, "gpu_h100/long_10min_default.dlscope"),
    "layout_transposes": (CNN, GPT),
    "kernel_bound": (NCU, (NCU, at_peak_variant)),
    "fusion_candidates": (GPT, CNN),
    "unfused_optimizer": (CNN, "advice_truth_dist/ddp2_straggler.dlscope"),
    "memory_underused": (CNN, GPT),
    "memory_near_limit": ((CNN, memory_near_limit_variant), CNN),
    "high_step_variance": (CNN, GPT),
    "straggler": ("advice_truth_dist/ddp2_straggler.dlscope", DDP),
    "comm_exposed": ("advice_truth_dist/lease4_twolaunch_host0.dlscope", DDP),
    "fsdp_exposed_gathers": ("advice_truth_dist/fsdp4_balanced_a.dlscope", "advice_truth_dist/fsdp4_straggler.dlscope"),
    "small_collectives": ("advice_truth_dist/small_collectives_naive.dlscope", DDP),
    "throttling": ((CNN, throttled_variant), CNN),
}


def _profile(case: Case, tmp_path: Path) -> Path:
    if isinstance(case, str):
        return DATA / case
    name, edit = case
    dst = tmp_path / Path(name).name
    shutil.copytree(DATA / name, dst, ignore=shutil.ignore_patterns(".cache"))
    edit(DATA / name, dst)
    return dst


_RUNS: dict[Path, advice.AdviceRun] = {}


def _advice(path: Path) -> advice.AdviceRun:
    if path not in _RUNS:  # stored profiles are shared by several rules' cases
        _RUNS[path] = advice.run(ProfileData.open(path))
    return _RUNS[path]


def test_every_rule_has_both_cases() -> None:
    assert set(CASES) == {r.id for r in advice.RULES}


@pytest.mark.parametrize("rule_id", list(CASES))
def test_the_rule_fires_on_its_problem(rule_id: str, tmp_path: Path) -> None:
    run = _advice(_profile(CASES[rule_id][0], tmp_path))
    found = {f.id: f for f in run.findings}
    assert rule_id in found, f"{rule_id}: clean={rule_id in run.clean} skipped={run.skipped.get(rule_id)}"
    f = found[rule_id]
    assert f.evidence.text and f.advice
    assert f.saving_pct is None or 0 <= f.saving_pct <= 100


@pytest.mark.parametrize("rule_id", list(CASES))
def test_the_rule_runs_and_stays_silent_without_it(rule_id: str, tmp_path: Path) -> None:
    run = _advice(_profile(CASES[rule_id][1], tmp_path))
    assert rule_id in run.clean, f"{rule_id}: found={rule_id in {f.id for f in run.findings}} " \
                                 f"skipped={run.skipped.get(rule_id)}"


# ---- the made cases' figures against the fact that was changed ----------------------------------------------

def _selected_peak(profile: Path, metric: str) -> float:
    """The largest sample of ``metric`` inside the steps the analysis selects (warm-up left out), from the files."""
    steps = [s for s in pq.read_table(profile / "steps.parquet").to_pylist() if not s["warmup"]]
    metric_id = _metric_ids(profile, {metric})[metric]
    samples = [c for c in pq.read_table(profile / "counters.parquet").to_pylist() if c["metric_id"] == metric_id]
    inside = [c["value"] for c in samples
              if any(s["rank"] == c["rank"] and s["start_ns"] <= c["ts_ns"] < s["end_ns"] for s in steps)]
    return max(inside)


def test_memory_near_limit_quotes_the_peak_and_the_capacity(tmp_path: Path) -> None:
    path = _profile(CASES["memory_near_limit"][0], tmp_path)
    f = {x.id: x for x in _advice(path).findings}["memory_near_limit"]
    row = f.evidence.rows[0]
    peak = _selected_peak(DATA / CNN, "mem_used")
    assert row["metric"] == "mem_used"
    assert row["peak_gb"] == pytest.approx(peak / 1e9)
    assert row["total_gb"] == pytest.approx(int(peak / 0.95) / 1e9)
    assert row["peak_pct"] == pytest.approx(95.0, abs=0.01)


def test_throttling_names_the_power_cap_in_every_busy_sample(tmp_path: Path) -> None:
    path = _profile(CASES["throttling"][0], tmp_path)
    f = {x.id: x for x in _advice(path).findings}["throttling"]
    row = f.evidence.rows[0]
    assert row["reasons"] == "software power cap"
    assert row["throttled_pct"] == pytest.approx(100.0)
    # the SM clock quoted is the mean of the samples taken with the reasons, the top one the highest sampled
    clocks = [c["value"] for c in pq.read_table(DATA / CNN / "counters.parquet").to_pylist()
              if c["metric_id"] == _metric_ids(DATA / CNN, {"sm_clock"})["sm_clock"]]
    assert row["clock_max_mhz"] == pytest.approx(max(clocks))
    assert min(clocks) <= row["clock_throttled_mhz"] <= max(clocks)


def test_kernel_bound_quotes_nsight_computes_throughputs() -> None:
    f = {x.id: x for x in _advice(DATA / NCU).findings}["kernel_bound"]
    ids = _metric_ids(DATA / NCU, {"Compute (SM) Throughput", "Memory Throughput"})
    names = _strings(DATA / NCU)
    by_kernel: dict[str, dict[int, float]] = {}
    for m in pq.read_table(DATA / NCU / "kernel_metrics.parquet").to_pylist():
        if m["metric_id"] in ids.values():
            by_kernel.setdefault(names[m["name_id"]], {})[m["metric_id"]] = m["value"]
    sm = {k: v[ids["Compute (SM) Throughput"]] for k, v in by_kernel.items()}
    mem = {k: v[ids["Memory Throughput"]] for k, v in by_kernel.items()}
    rows = f.evidence.rows
    assert len(rows) == len(by_kernel)
    assert sorted(r["sm_pct"] for r in rows) == pytest.approx(sorted(sm.values()))
    assert sorted(r["memory_pct"] for r in rows) == pytest.approx(sorted(mem.values()))
    for r in rows:  # each kernel can win at most what its busiest unit leaves
        assert r["headroom_ms"] == pytest.approx(r["ms_per_step"] * (1 - max(r["sm_pct"], r["memory_pct"]) / 100))
