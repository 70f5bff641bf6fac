"""Every rule fires on a profile with its problem and stays silent on one without it: real
fixtures where they have the case (the fixes of the GPT pair, the ResNet program's problems),
hand-made loops (advice_helpers.Loop) where they do not. Numbers of hand-made cases are checked
exactly: the loop says what they must be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlscope import advice
from dlscope.analysis.core.host_classes import HostClass

from .advice_helpers import ADD, MS, SGEMM, V100, Loop, findings, outcome
from .report_helpers import open_fixture


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    names = ("h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16")
    return {n: advice.run(open_fixture(n, tmp_path_factory)) for n in names}


# rule -> (fixture where it fires, fixture where it runs and stays silent). Every registered rule's pair of
# stored profiles, and the check that a new rule has one, is tests/test_rule_cases.py's CASES; these are more.
REAL_CASES = {
    "gpu_idle": ("h100_resnet50_phases", "h100_gpt6_fp32"),
    "launch_bound": ("h100_gpt6_bf16", "h100_gpt6_fp32"),
    "pageable_memcpy": ("h100_resnet50_phases", "h100_gpt6_bf16"),
    "sync_in_step": ("h100_resnet50_phases", "h100_gpt6_bf16"),
    "no_tensor_cores": ("h100_gpt6_fp32", "h100_gpt6_bf16"),
    "amp_not_enabled": ("h100_gpt6_fp32", "h100_gpt6_bf16"),
    "layout_transposes": ("h100_resnet50_phases", "h100_gpt6_fp32"),
    "fusion_candidates": ("h100_gpt6_fp32", "h100_resnet50_phases"),
    "unfused_optimizer": ("h100_gpt6_fp32", "h100_resnet50_phases"),
    "h2d_not_overlapped": ("h100_resnet50_phases", "h100_gpt6_fp32"),
    "input_bound": ("h100_resnet50_phases", None),
}


@pytest.mark.parametrize("rule_id", REAL_CASES)
def test_rule_fires_where_the_problem_is_and_not_where_it_was_fixed(real, rule_id):
    fires, silent = REAL_CASES[rule_id]
    assert rule_id in {f.id for f in real[fires].findings}
    if silent:
        assert rule_id in real[silent].clean


def test_gpu_idle_names_the_cause_and_the_longest_gap(real):
    f = {x.id: x for x in real["h100_resnet50_phases"].findings}["gpu_idle"]
    assert "waiting for input" in f.evidence.text and "input_bound" in f.advice
    assert all(r["host_phase_in_gap"] == "preprocess" for r in f.evidence.rows)
    assert {r["step"] for r in f.evidence.rows} == {2, 3, 4}
    g = {x.id: x for x in real["h100_gpt6_bf16"].findings}["gpu_idle"]
    assert "launch_bound" in g.advice


def test_launch_bound_points_at_compile_and_graphs(real):
    f = {x.id: x for x in real["h100_gpt6_bf16"].findings}["launch_bound"]
    # every step of the trace is traced: a saving of 20-50% is capped at MEDIUM, and says why
    assert f.severity == "medium" and "at most MEDIUM" in f.evidence.saving
    assert "torch.compile" in f.advice and "reduce-overhead" in f.advice
    # the replay leaves the forward and backward passes a fixed host cost (COMPILED_HOST_MS_PER_STEP,
    # PyTorch's own breakdown): this host-bound step, every step traced, shrinks by most of its host
    # work in the passes
    assert 20 <= f.saving_pct <= 80 and f.what_if is not None and "becomes a fixed 0.51 ms" in f.evidence.saving
    assert f.evidence.rows[0]["op"] == "aten::linear"  # the op launching the most kernels


def test_unfused_optimizer_suggests_fused_adamw_for_the_foreach_step(real):
    f = {x.id: x for x in real["h100_gpt6_fp32"].findings}["unfused_optimizer"]
    assert "torch.optim.AdamW(model.parameters(), ..., fused=True)" in f.advice
    assert f.evidence.rows[0]["implementation"] == "foreach"


# ---- hand-made loops ------------------------------------------------------------------------


def _loader_loop(tmp_path, overlapped: bool):
    """6 steps of 100 ms: a single-process DataLoader wait for 60 ms, then 35 ms of kernels;
    ``overlapped``: each step's kernel runs on through the next step's loading."""
    lp = Loop()
    if overlapped:
        lp.kernel(SGEMM, -2, -1, 60.5)
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.phase(
            "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            t,
            t + 60,
            domain="torch",
            source="record_function",
        )
        lp.kernel(SGEMM, t + 60.5, t + 60.6, t + (160.5 if overlapped else 95))
    return lp.open(tmp_path)


def test_input_bound_on_a_single_process_dataloader(tmp_path):
    f = findings(_loader_loop(tmp_path, overlapped=False))["input_bound"]
    assert f.bound_ms_per_step == pytest.approx(60.0, abs=0.01)  # the whole wait: the GPU had nothing queued
    assert "num_workers=0" in f.advice and "num_workers=N" in f.advice and "pin_memory=True" in f.advice


def test_input_bound_is_silent_when_loading_overlaps_the_gpu(tmp_path):
    assert outcome(_loader_loop(tmp_path, overlapped=True), "input_bound") == "clean"


@pytest.mark.parametrize("workers", [False, True])
def test_input_bound_on_a_program_without_gpu_speaks_of_the_step(tmp_path, workers):
    """A CPU-only loop: 6 steps of 100 ms, 30 ms of them in the DataLoader; no GPU anywhere. With
    worker processes, the wait for them varies (20 to 40 ms, the hooks' 'dataloader' phase): step
    variance blames it too."""
    lp = Loop()
    it = "_MultiProcessingDataLoaderIter" if workers else "_SingleProcessDataLoaderIter"
    wait = [20, 40] * 4 if workers else [30] * 6
    t = 0
    for i, w in enumerate(wait):
        lp.step(i, t, t + 70 + w)
        lp.phase(f"enumerate(DataLoader)#{it}.__next__", t, t + w, domain="torch", source="record_function")
        if workers:
            lp.phase("dataloader", t, t + w, source="hook")
        t += 70 + w
    found = findings(lp.open(tmp_path))
    f = found["input_bound"]
    assert f.title == "The step waits for input data"
    assert "GPU" not in f.title + f.advice and "pin_memory" not in f.advice
    if workers:
        assert "yet the step waits for them" in f.advice and "raise num_workers" in f.advice
        v = found["high_step_variance"]
        assert "keeping a buffer ahead of the step" in v.advice and "GPU" not in v.advice
    else:
        assert f.bound_ms_per_step == pytest.approx(30.0, abs=0.01) and f.bound_pct == pytest.approx(30.0, abs=0.01)
        assert "num_workers=N" in f.advice
        # once "per step": not "so each step waits 30.0 ms per step"
        assert "so each step waits 30.0 ms. Create it" in f.advice and "per step per" not in f.advice
        assert "waits 30.0 ms per step" not in f.advice


def _optimizer_loop(tmp_path, fused: bool):
    """Adam's step: 60 one-parameter add kernels and ops (0.5 ms of host time each), or one
    fused kernel."""
    lp = Loop()
    fused_name = (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)"
        "::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>"
        ">(int)"
    )
    op_id = 0
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.kernel(SGEMM, t + 1, t + 2, t + 45)
        lp.phase("Optimizer.step#Adam.step", t + 50, t + 90, domain="torch", source="record_function")
        for j in range(1 if fused else 60):
            a = t + 50 + j * 0.6
            op_id += 1
            lp.op("aten::_fused_adam_" if fused else "aten::add_", a, a + 0.5, op_id, external_id=op_id)
            lp.kernel(fused_name if fused else ADD, a + 0.1, a + 0.15, a + 0.16, external_id=op_id)
    return lp.open(tmp_path)


def test_unfused_optimizer_on_a_per_parameter_loop(tmp_path):
    f = findings(_optimizer_loop(tmp_path, fused=False))["unfused_optimizer"]
    row = f.evidence.rows[0]
    assert row["implementation"] == "per-parameter" and row["kernels_per_step"] == 60 and row["optimizer"] == "Adam"
    # host: 60 ops of 0.5 ms, of which one per pass (1 here) remains; GPU: one pass, nothing to gain
    assert f.bound_ms_per_step == pytest.approx(30 * (1 - 1 / 60), rel=1e-6)
    assert "fused=True" in f.advice


def test_unfused_optimizer_is_silent_once_fused(tmp_path):
    assert outcome(_optimizer_loop(tmp_path, fused=True), "unfused_optimizer") == "clean"


def test_h2d_not_overlapped_is_silent_when_a_kernel_covers_the_copy(tmp_path):
    lp = Loop()
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.kernel(SGEMM, t + 1, t + 5, t + 40)
        lp.copy("HtoD", "pinned", t + 2, t + 2.1, t + 10, t + 20)
    data = lp.open(tmp_path)
    assert outcome(data, "h2d_not_overlapped") == "clean"
    assert outcome(data, "pageable_memcpy") == "clean"


def _sgemm_loop(tmp_path, gpu: dict):
    """6 steps of 100 ms, each with 50 ms of fp32 sgemm that the host waits for, on ``gpu``."""
    lp = Loop()
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.kernel(SGEMM, t + 1, t + 2, t + 52)
        lp.call("cudaStreamSynchronize", t + 2, t + 52)
    return lp.open(tmp_path, devices=[gpu])


def test_no_tensor_cores_on_a_v100_asks_for_fp16_autocast(tmp_path):
    """fp16 tensor cores peak at 8x a V100's fp32 rate, so 50 * 7/8 ms of each step could go."""
    f = findings(_sgemm_loop(tmp_path, V100))
    ntc = f["no_tensor_cores"]
    assert ntc.bound_ms_per_step == pytest.approx(50 * 7 / 8, rel=1e-6)
    assert "torch.float16" in ntc.advice and "GradScaler" in ntc.advice and "allow_tf32" not in ntc.advice
    assert "amp_not_enabled" in f


def test_a_gpu_missing_from_the_datasheet_table_says_a100_ratios_are_assumed(tmp_path):
    """Same loop on a GPU of capability 12.0 (not in analysis.hardware's table): A100's TF32/FP32
    ratio 8 gives 50 * 7/8 ms, and the evidence says whose ratios were used."""
    gpu = dict(V100, name="NVIDIA Future GPU", compute_capability="12.0")
    ntc = findings(_sgemm_loop(tmp_path, gpu))["no_tensor_cores"]
    assert ntc.bound_ms_per_step == pytest.approx(50 * 7 / 8, rel=1e-6)
    assert "NVIDIA Future GPU (A100's ratios assumed" in ntc.evidence.saving


def _memory_loop(tmp_path, used_gb: float, launch_wait: bool = False, frees: bool = False):
    """6 steps of 100 ms on an 80 GB GPU: a 40 ms kernel per step, NVML mem_used samples;
    ``launch_wait``: the host is busy in an op for the first 50 ms while the GPU waits;
    ``frees``: a 2 ms cudaFree per step."""
    lp = Loop()
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        if launch_wait:
            lp.op("aten::mm", t, t + 50, i)
        lp.kernel(SGEMM, t + 50, t + 50.1, t + 90.1)
        if frees:
            lp.call("cudaFree", t + 20, t + 22)
        lp.sample("mem_used", t + 50, used_gb * 1e9)
    return lp.open(tmp_path, batch_size=32)


def test_memory_near_limit_fires_at_95_percent_with_the_allocators_time(tmp_path):
    data = _memory_loop(tmp_path, 76, frees=True)
    f = findings(data)["memory_near_limit"]
    assert f.evidence.rows[0]["peak_pct"] == pytest.approx(95.0)
    assert f.bound_ms_per_step == pytest.approx(2.0)  # the cudaFree calls
    assert "checkpoint" in f.advice and "expandable_segments" in f.advice
    assert outcome(data, "memory_underused") == "clean"


def test_memory_rules_are_silent_at_half_the_memory(tmp_path):
    data = _memory_loop(tmp_path, 40, launch_wait=True)
    assert outcome(data, "memory_near_limit") == "clean"
    assert outcome(data, "memory_underused") == "clean"  # a 2x batch would not fit with 10% to spare


def test_memory_underused_scales_the_batch_within_the_memory(tmp_path):
    """8 of 80 GB: a 4x batch fits (at most DLProf's 4x); the GPU waits while the host is busy
    (the 50 ms op and the 10 us launch call) each step, paid once for 4x the samples: 3/4 of it
    per current step's worth."""
    f = findings(_memory_loop(tmp_path, 8, launch_wait=True))["memory_underused"]
    assert f.evidence.rows[0]["batch_factor"] == 4
    assert f.bound_ms_per_step == pytest.approx(50.01 * 3 / 4, rel=1e-9)
    assert "from 32 to 128" in f.advice


def _steps_loop(tmp_path, durations: list[float]):
    lp = Loop()
    t = 0.0
    for i, d in enumerate(durations):
        lp.step(i, t, t + d)
        lp.phase("train", t, t + 90)
        lp.phase("logging", t + 90, t + d)
        t += d
    return lp.open(tmp_path)


def test_high_step_variance_names_the_slow_step_and_the_phase_that_grew(tmp_path):
    f = findings(_steps_loop(tmp_path, [100] * 5 + [200] + [100] * 2))["high_step_variance"]
    assert f.bound_ms_per_step == pytest.approx(100 / 8)  # one step 100 ms over the median, over 8 steps
    worst = f.evidence.rows[0]
    assert worst["step"] == 5 and worst["phase_that_grew"] == "logging"
    assert worst["phase_over_its_median_ms"] == pytest.approx(100)
    assert "'logging'" in f.advice and "--iter-start" in f.advice


def test_high_step_variance_is_silent_on_steady_steps_and_needs_five(tmp_path):
    assert outcome(_steps_loop(tmp_path, [100, 101, 99, 100, 100, 101]), "high_step_variance") == "clean"
    assert outcome(_steps_loop(tmp_path, [100, 200, 100]), "high_step_variance") == "skipped: 3 timed steps (needs 5)"


def _throttle_loop(tmp_path, reasons: int):
    """6 steps of 100 ms, the GPU busy 85 ms per step while the host waits for it; NVML says the
    clock sat at 1200 MHz (1980 MHz at the first sample) with ``reasons``."""
    lp = Loop()
    lp.sample("sm_clock", -1, 1980)
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.kernel(SGEMM, t + 1, t + 5, t + 90)
        lp.call("cudaStreamSynchronize", t + 5, t + 90)
        for k in range(10):
            lp.sample("gpu_util", t + 10 * k, 100)
            lp.sample("sm_clock", t + 10 * k + 1, 1200)
            lp.sample("throttle_reasons", t + 10 * k + 2, reasons)
    return lp.open(tmp_path)


def test_throttling_on_a_power_capped_gpu(tmp_path):
    f = findings(_throttle_loop(tmp_path, 0x4))["throttling"]
    # the whole (NVML-busy) step at 1200 instead of 1980 MHz
    assert f.bound_ms_per_step == pytest.approx(100 * (1 - 1200 / 1980), rel=1e-6)
    assert f.evidence.rows[0]["reasons"] == "software power cap" and f.evidence.rows[0]["steps"] == "steps 0-5"
    assert "nvidia-smi" in f.advice


def test_throttling_ignores_the_idle_reason(tmp_path):
    assert outcome(_throttle_loop(tmp_path, 0x1), "throttling") == "clean"


def test_every_rule_says_why_it_cannot_run_on_a_profile_without_gpu_data(tmp_path):
    lp = Loop()
    for i in range(6):
        lp.step(i, 100 * i, 100 * i + 100)
    r = advice.run(lp.open(tmp_path))
    assert not r.findings
    assert set(r.skipped) | set(r.clean) == {x.id for x in advice.RULES}
    assert all(isinstance(why, str) and why for why in r.skipped.values())
    assert r.skipped["gpu_idle"] == "the profile has no kernels data"


def test_step_is_ms():  # the helper's unit, which every expected number above relies on
    assert MS == 1_000_000


def test_launch_bound_in_a_cuda_program_gets_cuda_wording(tmp_path):
    """No framework: 200 launches of 20 us for kernels of 5 us per 5 ms step; the GPU waits
    15 us per kernel while the host is in the next launch call."""
    lp = Loop()
    for i in range(6):
        t = 5.0 * i
        lp.step(i, t, t + 5)
        for j in range(200):
            a = t + j * 0.02
            lp.call("cudaLaunchKernel", a, a + 0.02)
            lp.tables["kernels"].append(
                dict(
                    device=0,
                    stream=7,
                    start_ns=int((a + 0.02) * MS),
                    end_ns=int((a + 0.025) * MS),
                    name="saxpy_kernel",
                    correlation_id=lp.corr,
                    pid=1,
                )
            )
    f = findings(lp.open(tmp_path, frameworks={}))["launch_bound"]
    assert "cudaGraphLaunch" in f.advice and "torch" not in f.advice
    assert f.bound_pct == pytest.approx(100 * 200 * 0.015 / 5, rel=0.01)


def test_unfused_optimizer_leaves_out_forward_and_backward_run_inside_the_step(tmp_path):
    """PyTorch Lightning runs the training step's forward and backward inside optimizer.step(closure):
    their kernels and ops lie inside the optimizer's annotation but are the model's. The same 60
    per-parameter kernels as the plain loop, with a forward and a backward of 40 launches each
    nested in the step: the optimizer's kernels and its bound are the plain loop's."""
    lp = Loop()
    op_id = 0
    for i in range(6):
        t = 100 * i
        lp.step(i, t, t + 100)
        lp.phase("Optimizer.step#Adam.step", t + 5, t + 95, domain="torch", source="record_function")
        for name, start in (("forward", t + 6), ("backward", t + 20)):
            lp.phase(name, start, start + 12, source="hook")
            for j in range(40):
                a = start + j * 0.25
                op_id += 1
                lp.op("aten::mm", a, a + 0.2, op_id, external_id=op_id)
                lp.kernel(SGEMM, a + 0.05, a + 0.1, a + 0.3, external_id=op_id)
        for j in range(60):
            a = t + 35 + j * 0.6
            op_id += 1
            lp.op("aten::add_", a, a + 0.5, op_id, external_id=op_id)
            lp.kernel(ADD, a + 0.1, a + 0.15, a + 0.16, external_id=op_id)
    f = findings(lp.open(tmp_path))["unfused_optimizer"]
    row = f.evidence.rows[0]
    assert row["kernels_per_step"] == 60 and row["distinct_kernels"] == 1
    assert f.bound_ms_per_step == pytest.approx(30 * (1 - 1 / 60), rel=1e-6)


def test_the_fused_optimizer_host_shares_are_the_h100_measurement():
    """unfused_optimizer's host shares are the fused/loop ratios measured on an H100 for a model
    outside the suite (bench/fused_optimizer_host.py, stored beside the suite's results), and an
    optimizer not measured gets the largest: the smallest saving."""
    from types import SimpleNamespace

    from dlscope.advice import unfused_optimizer as rule

    measured = json.loads(
        (
            Path(__file__).resolve().parents[1]
            / "bench"
            / "advice_truth"
            / "results"
            / "fused_optimizer_h100"
            / "fused_optimizer_host.json"
        ).read_text()
    )
    assert measured["device"].startswith("NVIDIA H100")
    shares = rule.FUSED_HOST_SHARES
    assert shares == {name: round(measured[name]["fused_over_loop"], 3) for name in ("Adam", "AdamW", "SGD")}
    unknown = rule.FUSED_HOST_SHARE_UNKNOWN
    assert unknown == max(shares.values())

    def host_share(optimizer: str | None, implementation: str = "per-parameter") -> float:
        row = {"optimizer": optimizer, "implementation": implementation, "distinct_kernels": 4}
        return (
            rule.UnfusedOptimizer()
            .what_if(None, SimpleNamespace(evidence=SimpleNamespace(rows=[row])))
            .host[HostClass.OPTIMIZER]
        )

    assert host_share("AdamW") == 0.084 and host_share("SGD") == 0.191
    assert host_share("Adagrad") == host_share(None) == 0.191
    assert host_share("Adam", "foreach") == 0.25  # one op per pass: a quarter of four passes' dispatches


def test_a_masked_finding_names_the_fixes_above_it_and_its_own_saving_there():
    """'Masked now: once A, B are fixed it saves X ms' names the findings ranked above this one, never
    itself, and X is this finding's own saving after them (a restructuring once read the previous
    finding's what-if there: the profile's launch_bound said 'once amp_not_enabled, sync_in_step,
    launch_bound are fixed it saves 2.51 ms' where its own chain gives 27.86 ms)."""
    import re

    from dlscope.analysis.core.context import ProfileData
    from dlscope.application.advise import advise

    from .conftest import DATA

    findings = advise(ProfileData.open(DATA / "advice_truth_dist" / "lease4_fsdp2_base.dlscope")).findings
    masked = [f for f in findings if "Masked now:" in f.evidence.saving]
    assert masked
    for f in masked:
        m = re.search(r"Masked now: once (.+?) (?:is|are) fixed it saves ([\d.]+) ms", f.evidence.saving)
        assert m, f.evidence.saving
        assert f.what_if is not None
        assert m.group(1).split(", ") == f.what_if.fixed_above and f.id not in f.what_if.fixed_above
        assert float(m.group(2)) == pytest.approx(f.what_if.saving_after_above_ms, abs=0.006)
