"""The results cache (store/results_cache.py): the advice read back from it is the advice computed,
field for field, on real profiles; it is used only for the same files, code and step selection;
and a cache that is damaged, foreign, unwritable or turned off changes nothing but the time."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dlscope import advice
from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.application import advise as advise_case
from dlscope.store.results_cache import CACHE_DIR, DISABLE_ENV

DATA = Path(__file__).parent / "data"
# profiles whose advice holds what-if chains, alternatives, symptoms, negligible and untraced findings
PROFILES = [
    "advice_truth/cnn_baseline_default.dlscope",
    "advice_truth/gpt_baseline_default.dlscope",
    "advice_truth_hooks/gpt_no_item_default.dlscope",
    "advice_truth_dist/ddp2_straggler.dlscope",
    "gpu_h100/torch_ncu.dlscope",
]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    dst = tmp_path / "p.dlscope"
    shutil.copytree(DATA / PROFILES[0], dst, ignore=shutil.ignore_patterns(CACHE_DIR))
    return dst


@pytest.mark.parametrize("name", PROFILES)
def test_the_advice_read_back_is_the_advice_computed(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1")
    run = advice.run(ProfileData.open(DATA / name))
    back = advice.AdviceRun.from_record(json.loads(json.dumps(run.to_record())))
    assert back == run  # every field of every finding, the what-if chains, skipped rules and clean ones
    assert [f.as_dict() for f in back.findings] == [f.as_dict() for f in run.findings]
    assert run.findings, "a profile without findings checks nothing here"


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = advice.run

    def counted(data: ProfileData, rules: list[advice.Rule] | None = None) -> advice.AdviceRun:
        calls.append(1)
        return real(data, rules)

    monkeypatch.setattr(advice, "run", counted)
    return calls


def test_a_second_command_reads_what_the_first_computed(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    calls = _count_runs(monkeypatch)
    first = advise_case.advise(ProfileData.open(profile))
    second = advise_case.advise(ProfileData.open(profile))
    assert len(calls) == 1 and second == first
    assert len(list((profile / CACHE_DIR).glob("advice-*.json"))) == 1
    # another step selection is another result
    advise_case.advise(ProfileData.open(profile, Selection(include_warmup=True)))
    assert len(calls) == 2


def test_a_changed_file_is_evaluated_again(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    calls = _count_runs(monkeypatch)
    advise_case.advise(ProfileData.open(profile))
    kernels = profile / "kernels.parquet"
    st = kernels.stat()
    os.utime(kernels, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # as `ncu` or `try` rewriting a table
    advise_case.advise(ProfileData.open(profile))
    assert len(calls) == 2
    assert len(list((profile / CACHE_DIR).glob("advice-*.json"))) == 1  # the stale one went


@pytest.mark.parametrize("content", ["{not json", '{"findings": [{"id": 1}]}', "[]", '"x"'])
def test_a_damaged_or_foreign_cache_is_evaluated_again(
    profile: Path, content: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    fresh = advise_case.advise(ProfileData.open(profile))
    [kept] = (profile / CACHE_DIR).glob("advice-*.json")
    kept.write_text(content)
    calls = _count_runs(monkeypatch)
    assert advise_case.advise(ProfileData.open(profile)) == fresh
    assert len(calls) == 1


def test_turned_off_or_unwritable_nothing_is_kept(profile: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DISABLE_ENV, "1")
    calls = _count_runs(monkeypatch)
    advise_case.advise(ProfileData.open(profile))
    advise_case.advise(ProfileData.open(profile))
    assert len(calls) == 2 and not (profile / CACHE_DIR).exists()
    monkeypatch.delenv(DISABLE_ENV)
    (profile / CACHE_DIR).write_text("a file where the folder would go")  # as a read-only profile fails
    advise_case.advise(ProfileData.open(profile))
    assert len(calls) == 3
