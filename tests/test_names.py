"""Rules and fixes are named by the vocabulary's enums (issue 37's typed seams): every registered rule's
id is a RuleId and every RuleId a registered rule, each once; every registered fix's name a FixName and
every FixName a registered fix (also tests/test_try_links.py); what links them (a fix's rules, a rule's
alternative, a finding's fixes, try's choice and the settings a run of try crosses the process boundary
with) holds members, not text. The members still read, print and serialize as their text."""

from __future__ import annotations

import json

import pytest

from dlscope import advice
from dlscope.application.try_fixes import FixChoice, fix_names
from dlscope.capture.base import Settings, TryRun
from dlscope.capture.fixes import BY_NAME, FIXES, fixes_for
from dlscope.errors import UsageError
from dlscope.vocabulary.names import FixName, RuleId


def test_every_rule_id_is_a_member_and_every_member_a_rule() -> None:
    ids = [r.id for r in advice.RULES]
    assert all(type(i) is RuleId for i in ids), [i for i in ids if type(i) is not RuleId]
    assert len(set(ids)) == len(ids)  # no two rules share an id
    assert set(ids) == set(RuleId)  # and no member is left without its rule


def test_every_fix_name_is_a_member_and_every_member_a_fix() -> None:
    names = [f.name for f in FIXES]
    assert all(type(n) is FixName for n in names), [n for n in names if type(n) is not FixName]
    assert len(set(names)) == len(names)
    assert set(names) == set(FixName)
    assert list(BY_NAME) == names and all(type(k) is FixName for k in BY_NAME)


def test_the_links_between_them_are_members() -> None:
    for f in FIXES:
        assert all(type(r) is RuleId for r in f.rules), f.name
    for rule in advice.RULES:
        assert rule.alternative_to is None or type(rule.alternative_to) is RuleId, rule.id
        assert all(type(n) is FixName for n in fixes_for(rule.id))


def test_members_read_as_their_text() -> None:
    assert RuleId("amp_not_enabled") is RuleId.AMP_NOT_ENABLED and FixName("bf16") is FixName.BF16
    for m in (RuleId.AMP_NOT_ENABLED, FixName.FUSED_OPT):
        assert m == m.value and hash(m) == hash(m.value) and {m.value: 1}[m] == 1
        assert str(m) == f"{m}" == f"{m:s}" == m.value
        assert f"{m:>20}" == f"{m.value:>20}"
        assert json.dumps({m: [m]}) == json.dumps({m.value: [m.value]})
        assert ",".join([m, m]) == f"{m.value},{m.value}"


def test_fixes_asked_become_members_at_the_front_door() -> None:
    assert fix_names(" bf16, auto ,tf32,") == FixChoice(True, (FixName.BF16, FixName.TF32))
    assert all(type(n) is FixName for n in fix_names("fused_opt,compile_graphs").named)
    with pytest.raises(UsageError) as e:
        fix_names("bf16,bf17")
    assert str(e.value) == (
        "unknown fix 'bf17' (known: auto, bf16, tf32, workers, pinned, batch, fused_opt, "
        "channels_last, cudnn_benchmark, compile, compile_graphs, defer_sync)"
    )


def test_a_try_run_names_its_fixes_by_member_across_the_process_boundary() -> None:
    s = Settings(try_run=TryRun([FixName.WORKERS], {FixName.WORKERS: {"predicted_saving_pct": 76.0}}))
    text = json.dumps(s.to_dict())
    assert '"fixes": ["workers"]' in text and '"fix_options": {"workers": ' in text
    back = Settings.from_dict(json.loads(text)).try_run
    assert back is not None and back == s.try_run
    assert [type(n) for n in back.fixes] == [FixName] and [type(n) for n in back.fix_options] == [FixName]
