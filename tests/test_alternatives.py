"""Alternatives shown together (issue 38, "Also seen"): no_tensor_cores (TF32) and amp_not_enabled
(bf16 autocast) are two ways to the same kernels, not steps of one chain. On real H100 profiles
where both fire: the two sit together where the larger ranks, largest saving alone first; each
shows the saving it has when the other rule does not run at all (its own, computed by an
evaluation without the other rule), and the chain below counts both fixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlscope import advice
from dlscope.advice import KEYS, Finding
from dlscope.analysis.core.context import ProfileData
from dlscope.store.results_cache import DISABLE_ENV
from dlscope.vocabulary.names import RuleId

DATA = Path(__file__).parent / "data"
TF32, AMP = RuleId.NO_TENSOR_CORES, RuleId.AMP_NOT_ENABLED
# TF32 saves more alone than bf16 autocast (whose casts cost host time on a host-bound step), and
# the reverse: the group's order follows the savings either way
PROFILES = ["advice_truth/gpt_baseline_default.dlscope", "advice_truth_hooks/gpt2_baseline_default.dlscope"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1")


def _without(data: ProfileData, rule_id: RuleId) -> dict[RuleId, Finding]:
    """The findings of every rule but ``rule_id``: what the others say when it does not exist."""
    return {f.id: f for f in advice.run(data, [r for r in advice.RULES if r.id != rule_id]).findings}


@pytest.mark.parametrize("name", PROFILES)
def test_alternatives_sit_together_with_their_own_savings(name: str) -> None:
    data = ProfileData.open(DATA / name)
    findings = advice.run(data).findings
    ids = [f.id for f in findings]
    by_id = {f.id: f for f in findings}
    tf32, amp = by_id[TF32], by_id[AMP]
    assert tf32.alternatives == [AMP] and amp.alternatives == [TF32]
    # together, the larger saving alone first
    first, second = sorted((tf32, amp), key=lambda f: -(f.saving_pct or 0.0))
    at = ids.index(first.id)
    assert ids[at + 1] == second.id
    # where the larger ranks among the causes: every cause above saves at least as much, none below more
    causes = [f for f in findings if not f.symptom and not f.negligible and f.id not in (TF32, AMP)]
    above, below = [f for f in causes if ids.index(f.id) < at], [f for f in causes if ids.index(f.id) > at]
    assert all((f.saving_pct or 0) >= (first.saving_pct or 0) for f in above)
    assert all((f.saving_pct or 0) <= (first.saving_pct or 0) for f in below)
    # each one's figures are those it has when the other rule does not run: alone, and after the fixes above
    # the group (never after the other's fix)
    for f, other in ((tf32, amp), (amp, tf32)):
        own = _without(data, other.id)[f.id]
        assert f.saving_ms_per_step == pytest.approx(own.saving_ms_per_step, rel=1e-9)
        assert f.saving_pct == pytest.approx(own.saving_pct, rel=1e-9)
        assert f.what_if is not None and own.what_if is not None and other.id not in f.what_if.fixed_above
        assert f.what_if.fixed_above == [a.id for a in above if a.what_if is not None]
        assert f.what_if.saving_after_above_ms == pytest.approx(own.what_if.saving_after_above_ms, rel=1e-9)
    # the chain below counts both fixes as done (what is left after the fuller change, as before the
    # grouping): each finding below says what it says with the two fixes above it in one chain
    chained = [f for f in findings[at + 2 :] if f.what_if is not None]
    assert chained, "nothing below the group to check the chain on"
    for f in chained:
        assert f.what_if is not None and {first.id, second.id} <= set(f.what_if.fixed_above)
    # the line that says so, with each saving alone, in the order shown
    note = tf32.alternatives_note
    assert note and note == amp.alternatives_note and note.startswith("Pick one")
    assert note.index(f"{first.id} {first.saving_pct:.1f}%") < note.index(f"{second.id} {second.saving_pct:.1f}%")
    assert "TF32: one line" in note and "bf16 autocast" in note and f"count {first.id} and {second.id} as done" in note


def test_advise_shows_the_group_in_text_and_json(cli) -> None:
    """The issue's page: TF32 (the larger here, 26.6% alone) no longer comes last with '0.00 ms once
    amp_not_enabled ... fixed' under 'most costly first'."""
    path = DATA / PROFILES[0]
    r = cli("advise", path, "--format", "json")
    out = json.loads(r.out)
    assert r.code == 0 and [tuple(f) for f in out] == [KEYS] * len(out)
    ids = [f["id"] for f in out]
    got = {f["id"]: f for f in out}
    assert ids.index("no_tensor_cores") + 1 == ids.index("amp_not_enabled")
    assert got["no_tensor_cores"]["saving_pct"] > got["amp_not_enabled"]["saving_pct"]
    assert got["no_tensor_cores"]["alternatives"] == ["amp_not_enabled"]
    assert got["amp_not_enabled"]["alternatives"] == ["no_tensor_cores"]
    pair = ("no_tensor_cores", "amp_not_enabled")
    assert all(f["alternatives"] == [] and f["alternatives_note"] is None for f in out if f["id"] not in pair)
    # every LOW finding comes after the group
    lows = [ids.index(f["id"]) for f in out if f["severity"] == "low"]
    assert lows and min(lows) > ids.index("amp_not_enabled")
    r = cli("advise", path)
    text = " ".join(r.out.split())  # rich wraps long lines
    assert r.code == 0 and "once amp_not_enabled" not in text and "once no_tensor_cores, amp_not_enabled" not in text
    head = text.index("ALTERNATIVES Pick one")
    assert head < text.index("(no_tensor_cores)") < text.index("(amp_not_enabled)")
    assert text.count("ALTERNATIVES") == 1
    assert "26.6% of step time alone (or instead: amp_not_enabled)" in text


def test_the_html_report_leads_the_group_with_the_line() -> None:
    from dlscope.render.html.details import advice_section

    findings = advice.run(ProfileData.open(DATA / PROFILES[0])).findings
    html = advice_section(findings)
    assert html.count('class="alternatives"') == 1
    line = html.index('class="alternatives"')
    assert line < html.index("<code>no_tensor_cores</code>") < html.index("<code>amp_not_enabled</code>")
    assert html.rindex("</article>", 0, line) < line  # between the findings above and the group
