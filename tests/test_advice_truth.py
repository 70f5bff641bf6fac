"""The advice against measured fixes (issue 14): the suite's baseline profiles (recorded on an H100
by bench/advice_truth/run_gpu.py) and the savings each single fix really gave, measured untraced
over three machine leases (bench/advice_truth/results). The measurements are data; these tests
check the rules and the replay against them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dlscope import advice
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.host_classes import Blocking, HostClass
from dlscope.analysis.models import replay as R

from .advice_helpers import replay_input

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "advice_truth"
SUITE = REPO / "bench" / "advice_truth"
sys.path.insert(0, str(SUITE))
import table  # noqa: E402

MODELS = ("cnn", "gpt", "mlp")


def profile(model: str, mode: str = "default") -> ProfileData:
    return ProfileData.open(DATA / f"{model}_baseline_{mode}.dlscope")


@pytest.mark.parametrize("mode", ["default", "full"])
@pytest.mark.parametrize("model", MODELS)
def test_the_replay_reproduces_the_traced_steps(model, mode):
    """At host factor 1 the replay of the recorded calls and GPU work lasts as long as the traced
    steps did (their durations read from the steps table, not from the replay's input)."""
    d = profile(model, mode)
    calls = R.replay_calls(d)
    traced = d.scalar("SELECT avg(end_ns - start_ns) / 1e6 FROM detail_steps")
    assert calls.windows == d.scalar("SELECT count(*) FROM detail_steps")
    assert R.step_ms(calls) == pytest.approx(traced, rel=0.04)


@pytest.mark.parametrize("model", MODELS)
def test_calibration_matches_the_untraced_steps(model):
    d = profile(model)
    calls = R.replay_calls(d)
    untraced = d.scalar("SELECT avg(end_ns - start_ns) / 1e6 FROM stat_steps")
    assert not d.scalar("SELECT count(*) FROM stat_steps WHERE traced")
    cal = R.calibrate(calls, untraced)
    if cal.traced_ms > untraced:  # tracing slowed the host: the factor brings the replay down to the truth
        assert cal.host_factor < 1 and R.step_ms(calls, cal.host_factor) == pytest.approx(untraced, rel=0.01)
    else:
        assert cal.host_factor == 1.0


def test_replay_by_hand():
    """One step: 10 ms of input, three launches 1 ms apart (host work 1 ms each) of 5 ms kernels,
    then a synchronize. GPU: 11-16, 16-21, 21-26; the host waits until 26. Without the sync the step
    ends when the GPU does (26); without the input the GPU starts at 1: 1-6, 6-11, 11-16."""
    c = replay_input(
        wid=[1, 1, 1, 1],
        gap_input=[10e6, 0, 0, 0],
        gap_model=[1e6, 1e6, 1e6, 0],
        cls=[0, 2, 2, 2],
        blocking=[0, 0, 0, 1],
        gpu_ns=[5e6, 5e6, 5e6, 0],
    )
    assert R.replay(c) == pytest.approx(26e6)
    assert R.replay(R.Fix("x", unblock=(Blocking.SYNC,)).apply(c)) == pytest.approx(26e6)
    assert R.replay(R.Fix("x", host={HostClass.INPUT: 0.0}).apply(c)) == pytest.approx(16e6)
    # halve the host's model work: launches at 10.5, 11, 11.5; the GPU is the bottleneck from the first
    # kernel on, so only the first launch's half millisecond shows: 25.5
    assert R.replay(R.Fix("x", host={HostClass.MODEL: 0.5}).apply(c)) == pytest.approx(25.5e6)
    # kernels 10x faster: the host sets the pace: last launch at 13, its kernel ends 13.5
    assert R.replay(
        R.Fix("x", gpu={"simt_ns": 0.1}).apply(
            replay_input(
                wid=[1, 1, 1, 1],
                gap_input=[10e6, 0, 0, 0],
                gap_model=[1e6, 1e6, 1e6, 0],
                cls=[0, 2, 2, 2],
                blocking=[0, 0, 0, 1],
                gpu_ns=[5e6, 5e6, 5e6, 0],
                simt_ns=[5e6, 5e6, 5e6, 0],
            )
        )
    ) == pytest.approx(13.5e6)
    # a larger batch: GPU work and input double, per sample the step is 46/2 = 23 ms
    two = R.Fix("x", batch=2.0).apply(c)
    assert R.step_ms(two, per_sample_of=2.0) == pytest.approx((20 + 1 + 30) / 2)
    # ... but an optimizer's kernels work per parameter: a 4 ms optimizer kernel launched last
    # (host 1 ms after the last model launch) stays 4 ms: 20 input + 1 + 30 model GPU + 4 = 55
    opt = replay_input(
        wid=[1] * 5,
        gap_input=[10e6, 0, 0, 0, 0],
        gap_model=[1e6, 1e6, 1e6, 0, 0],
        gap_optimizer=[0, 0, 0, 1e6, 0],
        cls=[0, 2, 2, 1, 2],
        blocking=[0, 0, 0, 0, 1],
        gpu_ns=[5e6, 5e6, 5e6, 4e6, 0],
    )
    assert R.step_ms(R.Fix("x", batch=2.0).apply(opt), per_sample_of=2.0) == pytest.approx((20 + 1 + 30 + 4) / 2)


def test_criteria_on_the_measured_table():
    """Issue 14's three criteria over the (baseline, fix) pairs whose measured saving is clear of the
    noise, on the default mode's profiles. One miss is known and named in bench/RESULTS.md: the
    CNN's channels_last (measured 7.4%, 3.7..11.5 over the leases) ranks 4th: its estimate counts
    the layout conversions it removes, not the faster NHWC convolutions cuDNN then picks."""
    rows = []
    for model in MODELS:
        rows += table.rows_for(
            model, table.advised(DATA / f"{model}_baseline_default.dlscope"), table.measured(SUITE / "results", model)
        )
    checks = [(r["model"], r["fix"], c["criterion"]) for r in rows for c in r["checks"]]
    misses = [(r["model"], r["fix"], c["criterion"]) for r in rows for c in r["checks"] if not c["ok"]]
    assert len(checks) >= 18
    assert misses == [("cnn", "channels_last", "named in top 3")]
    by = {(r["model"], r["fix"]): r for r in rows}
    # the fixes that matter most are ranked first, and estimated within 0.5x..2x
    assert by[("cnn", "workers")]["rank"] == 1 and by[("gpt", "workers")]["rank"] == 1
    assert by[("mlp", "batch2x")]["rank"] == 1 and by[("mlp", "fused_opt")]["rank"] <= 3
    # bf16 slows the launch-bound MLP (measured -15..-22%): no bf16 finding there
    assert by[("mlp", "bf16")]["real_pct"] < -10 and by[("mlp", "bf16")]["rank"] is None


def test_a_masked_cause_is_named_with_its_saving_after_the_chain():
    """On the input-bound CNN, autocast saves nothing now (the host sets the pace and autocast adds
    host work), but once the findings above it are fixed it does: it is named, not dropped."""
    f = {x.id: x for x in advice.evaluate(profile("cnn"))}["amp_not_enabled"]
    w = f.what_if
    assert f.saving_pct < 2 and w.saving_after_above_ms / w.step_ms * 100 >= 2
    assert "input_bound" in w.fixed_above and "Masked now" in f.evidence.saving
    assert w.fixed_step_ms > w.step_ms and "would lengthen the step" in f.evidence.saving
    assert f.severity != "info"


def test_gpu_idle_sets_the_gpu_busy_time_against_the_untraced_step():
    """The MLP's traced steps ran 11.5 ms, its untraced ones 7.0 ms: the GPU's idle share is read
    against the untraced step, never the traced one."""
    d = profile("mlp")
    f = {x.id: x for x in advice.evaluate(d)}["gpu_idle"]
    busy = d.scalar("""SELECT sum(end_ns - start_ns) / 1e6 FROM (SELECT k.start_ns, k.end_ns FROM kernels k
                       SEMI JOIN detail_steps s ON s.step = k.step)""") / d.scalar("SELECT count(*) FROM detail_steps")
    untraced = d.scalar("SELECT avg(end_ns - start_ns) / 1e6 FROM stat_steps")
    # kernels of this launch-bound MLP never overlap, so their summed time is the busy time
    assert f.saving_ms_per_step == pytest.approx(untraced - busy, rel=0.02)
    assert "traced steps themselves ran" in f.evidence.saving


def test_what_if_command(cli):
    r = cli("advise", DATA / "cnn_baseline_default.dlscope", "--what-if")
    assert r.code == 0 and "input_bound" in r.out and "Host work scaled by 0.69" in r.out


@pytest.mark.parametrize(
    "variant, rule",
    [("cnn_workers", "input_bound"), ("gpt_workers", "input_bound"), ("mlp_fused_opt", "unfused_optimizer")],
)
def test_the_rule_is_silent_once_its_fix_is_in(variant, rule):
    """The same programs with the fix applied (recorded on the H100 like the baselines): the rule
    that named the problem finds nothing worth a finding, while it fired on the baseline."""
    base = {f.id: f for f in advice.evaluate(profile(variant.split("_")[0]))}
    fixed = {f.id: f for f in advice.evaluate(ProfileData.open(DATA / f"{variant}_default.dlscope"))}
    assert base[rule].saving_pct >= 20
    assert rule not in fixed or fixed[rule].saving_pct < 2
