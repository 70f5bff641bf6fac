"""Severity rests on the basis (dlscope.advice.severity_basis): a profile whose every step was
traced cannot make a finding CRITICAL or HIGH, since the tracer slowed the host timing it rests on;
a profile with untraced steps keeps them."""

from __future__ import annotations

from pathlib import Path

from dlscope import advice
from dlscope.advice.finding import severity_for
from dlscope.advice.severity_basis import NOTE
from dlscope.analysis.core.context import ProfileData

DATA = Path(__file__).parent / "data"


def test_a_fully_traced_trace_is_at_most_medium(tmp_path, cli):
    """The HTA corpus's AlexNet trace (A100, every step traced by torch.profiler): the GPU idles
    over half of each step while the host launches, which alone would be CRITICAL."""
    out = tmp_path / "alexnet.dlscope"
    trace = DATA / "hta_corpus" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
    assert cli("import", trace, "-o", out).code == 0
    findings = advice.run(ProfileData.open(out)).findings
    idle = next(f for f in findings if f.id == "gpu_idle")
    assert severity_for(idle.saving_pct) == "critical"  # what its saving alone would say
    assert idle.severity == "medium" and NOTE in idle.evidence.saving
    assert all(f.severity not in ("critical", "high") for f in findings)


def test_untraced_steps_keep_their_severity():
    """The suite's GPT-2 recorded in the default mode (untraced steps timed): bf16's replayed
    saving of about two thirds of the step stays CRITICAL, without the note."""
    data = ProfileData.open(DATA / "advice_truth_hooks" / "gpt2_baseline_default.dlscope")
    amp = next(f for f in advice.run(data).findings if f.id == "amp_not_enabled")
    assert amp.severity == "critical" and amp.saving_pct > 50
    assert NOTE not in amp.evidence.saving
