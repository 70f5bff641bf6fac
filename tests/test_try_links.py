"""Every finding says how `dlscope try` tests it (issue 38): the fixes that answer its rule, or why no
run can. Checked against the fixes' own declarations, on a real profile, in text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

from dlscope import advice
from dlscope.capture.fixes import FIXES

DATA = Path(__file__).parent / "data"
CNN = DATA / "advice_truth/cnn_baseline_default.dlscope"


def test_every_rule_has_a_fix_or_says_why_none_can_exist() -> None:
    answered = {r for f in FIXES for r in f.rules}
    for rule in advice.RULES:
        assert (rule.id in answered) != bool(rule.no_try_fix), rule.id  # one or the other, never both
    assert answered <= {r.id for r in advice.RULES}  # no fix names a rule that is gone


def test_advise_names_the_fix_or_the_reason(cli) -> None:
    r = cli("advise", CNN, "--format", "json")
    assert r.code == 0
    found = json.loads(r.out)
    assert found
    by_rule = {}
    for f in FIXES:
        for rule in f.rules:
            by_rule.setdefault(rule, []).append(f.name)
    reasons = {x.id: x.no_try_fix for x in advice.RULES}
    for f in found:
        assert f["try"]["fixes"] == by_rule.get(f["id"], [])
        assert f["try"]["why_none"] == (None if f["id"] in by_rule else reasons[f["id"]])
    assert any(f["try"]["fixes"] for f in found) and any(f["try"]["why_none"] for f in found)
    text = cli("advise", CNN).out
    first_with_fix = next(f for f in found if f["try"]["fixes"])
    assert f"test it: dlscope try --fixes {','.join(first_with_fix['try']['fixes'])} -- <your command>" in text


def test_the_names_are_the_registries() -> None:
    """RuleId and FixName name exactly the registered rules and fixes, each once: a rule or fix added or
    removed without its name (or a name left behind) fails here."""
    from dlscope.vocabulary.names import FixName, RuleId

    assert sorted(r.id for r in advice.RULES) == sorted(RuleId) and all(isinstance(r.id, RuleId) for r in advice.RULES)
    assert sorted(f.name for f in FIXES) == sorted(FixName) and all(isinstance(f.name, FixName) for f in FIXES)
    assert all(isinstance(r, RuleId) for f in FIXES for r in f.rules)
    assert json.dumps([RuleId.GPU_IDLE, FixName.BF16]) == '["gpu_idle", "bf16"]' and f"{FixName.BF16}" == "bf16"


def test_every_finding_of_5pct_on_the_suites_gpu_profiles_has_a_fix_or_a_reason(cli) -> None:
    """Issue 38's acceptance on the suite's programs as profiled on the GPU hosts (the stored profiles
    of bench/advice_truth's baselines, default and full mode, and the held-out ViT): every finding of 5% or
    more names the `try` fix that tests it or says why none can exist, and most of them have a fix."""
    profiles = sorted((DATA / "advice_truth").glob("*_default.dlscope")) + sorted(
        (DATA / "advice_truth").glob("*_full.dlscope")
    )
    profiles += sorted((DATA / "heldout").glob("*.dlscope"))
    assert len(profiles) >= 8
    with_fix = without = 0
    for p in profiles:
        r = cli("advise", p, "--format", "json")
        assert r.code == 0, p
        for f in json.loads(r.out):
            if (f["saving_pct"] or 0) < 5:
                continue
            assert f["try"]["fixes"] or f["try"]["why_none"], (p.name, f["id"])
            with_fix += bool(f["try"]["fixes"])
            without += not f["try"]["fixes"]
    assert with_fix >= 30 and with_fix > 3 * without
