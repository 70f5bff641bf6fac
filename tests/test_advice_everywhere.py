"""Every rule on every file of HTA's corpus, the fixtures and the nsys exports: it runs or says
why not, never a traceback; every finding keeps the contract (keys, bounds, step numbers); and the
command line (dlscope advise, the summary's advice) on real profiles and bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import tarfile

import pytest

from dlscope import advice
from dlscope.advice import KEYS, SEVERITIES, alternatives
from dlscope.analysis.core.context import ProfileData, Selection

from .conftest import DATA, REPO, assert_one_line_error, corpus_files, corpus_id
from .report_helpers import fixture_path, imported

FIXTURES = ["h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16"]
RECORDED = REPO / "examples" / "data" / "h100_resnet50.dlscope.tgz"


def check_contract(data: ProfileData) -> advice.AdviceRun:
    run = advice.run(data)
    assert set(run.skipped) | set(run.clean) | {f.id for f in run.findings} == {r.id for r in advice.RULES}
    unit = None
    for f in run.findings:
        d = f.as_dict()
        assert tuple(d) == KEYS and f.severity in SEVERITIES and f.url.startswith("https://")
        json.dumps(d)  # JSON-ready
        assert f.title and f.advice and f.evidence.text and f.evidence.saving
        assert f.saving_pct is not None and 0 <= f.saving_pct <= 100 + 1e-9
        if f.saving_ms_per_step is not None:
            unit = unit or f.saving_ms_per_step * 100 / f.saving_pct if f.saving_pct else unit
            assert f.saving_ms_per_step >= 0
        assert isinstance(f.evidence.rows, list) and all(isinstance(r, dict) for r in f.evidence.rows)
    # causes, then symptoms; within each the largest saving first, alternatives together at the best one's place
    assert run.findings == alternatives.ranked(run.findings)
    for i, f in enumerate(run.findings):
        group = run.findings[i : i + 1 + len(f.alternatives)]
        if f.alternatives and (not i or run.findings[i - 1].id not in f.alternatives):
            assert [g.id for g in group[1:]] == f.alternatives and all(g.alternatives_note for g in group)
    for f in run.findings:
        assert f.bound_ms_per_step is None or f.bound_ms_per_step >= 0
        if f.what_if is not None:  # a replayed prediction: the saving is the step it takes off
            w = f.what_if
            assert w.fixed_step_ms >= 0 and 0 < w.host_factor <= 1
            if not w.per_sample:
                assert f.saving_ms_per_step == pytest.approx(max(w.step_ms - w.fixed_step_ms, 0.0), abs=1e-9)
    for why in run.skipped.values():
        assert isinstance(why, str) and why and "\n" not in why
    return run


@pytest.mark.parametrize("path", corpus_files(), ids=corpus_id)
def test_every_rule_on_every_corpus_file(tmp_path_factory, path):
    check_contract(ProfileData.open(imported(path, tmp_path_factory)))


@pytest.mark.parametrize("name", FIXTURES)
def test_every_rule_on_the_fixtures_and_narrow_selections(tmp_path_factory, name):
    path = imported(fixture_path(name), tmp_path_factory)
    run = check_contract(ProfileData.open(path))
    assert run.findings
    first = ProfileData.open(path).scalar("SELECT min(step) FROM steps")
    for sel in (Selection(iter_start=first, iter_stop=first), Selection(iter_start=10_000)):
        check_contract(ProfileData.open(path, sel))
    none = advice.run(ProfileData.open(path, Selection(iter_start=10_000)))
    assert not none.findings and none.skipped["gpu_idle"] == "no GPU activity in the selected steps"


@pytest.mark.parametrize("name", ["h100_nsys_mlp", "h100_nsys_domains"])
def test_nsys_exports_of_pytorch_programs(tmp_path_factory, name):
    """Two PyTorch programs seen through Nsight Systems: no ops and no steps, but ATen's kernel
    names tell the framework; savings are shares of the profile's time."""
    src = tmp_path_factory.mktemp("nsys") / f"{name}.sqlite"
    with gzip.open(DATA / "nsys" / f"{name}.sqlite.gz") as f, open(src, "wb") as out:
        shutil.copyfileobj(f, out)
    run = check_contract(ProfileData.open(imported(src, tmp_path_factory)))
    found = {f.id: f for f in run.findings}
    assert "launch_bound" in found and "torch.compile" in found["launch_bound"].advice
    assert all(f.saving_ms_per_step is None for f in run.findings)
    assert run.skipped["high_step_variance"].startswith("the profile has no steps")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The profile dlscope recorded on an H100 (sampled detail, NVML counters), when bundled."""
    if not RECORDED.exists():
        pytest.skip(f"{RECORDED} is not in this checkout")
    d = tmp_path_factory.mktemp("rec")
    with tarfile.open(RECORDED) as t:
        t.extractall(d, filter="data")
    return next(d.glob("*.dlscope"))


def test_the_recorded_resnet_profile(recorded):
    """Steps 1-6 traced, 7-15 timed: GPU figures from the traced steps, shares of the untraced
    steps' mean; the preprocess phase dominates; NVML saw no throttling (only the idle reason)
    and 8.4 of 85.5 GB in use."""
    data = ProfileData.open(recorded)
    run = check_contract(data)
    found = {f.id: f for f in run.findings}
    assert {"input_bound", "pageable_memcpy", "sync_in_step", "memory_underused", "high_step_variance"} <= set(found)
    assert "throttling" in run.clean and "memory_near_limit" in run.clean
    mean = data.scalar("SELECT avg(end_ns - start_ns) / 1e6 FROM stat_steps")
    ib = found["input_bound"]
    assert ib.saving_pct == pytest.approx(100 * ib.saving_ms_per_step / mean)
    assert "already in use" in ib.advice  # the program's DataLoader has worker processes
    assert found["memory_underused"].evidence.rows[0]["batch_size"] == 64
    # the traced steps' phases sit under the tracing window's range: the longest gap is still
    # named after the outermost phase a user wrote, and the stop step (no GPU data) is not a row
    idle = found["gpu_idle"].evidence.rows
    assert [r["host_phase_in_gap"] for r in idle] == ["preprocess"] * 5 and {r["step"] for r in idle} == {1, 2, 3, 4, 5}


def test_advise_command_text_json_and_verbose(cli, tmp_path_factory):
    path = imported(fixture_path("h100_resnet50_phases"), tmp_path_factory)
    r = cli("advise", path)
    # an imported trace has every step traced: its host timing is unconfirmed, so at most MEDIUM
    assert r.code == 0 and "MEDIUM The GPU waits for input data (input_bound)" in r.out and "at most MEDIUM" in r.out
    # the replay's prediction, and how it was made with the rule's own bound (83.89 ms: the GPU's idle
    # time inside 'preprocess')
    text = " ".join(r.out.split())  # rich wraps long lines
    assert "saving: predicted 83." in text and "how: predicted by replaying" in text
    assert "The rule's own bound: the GPU sat idle through" in text and "83.9 ms shorter" in text
    r = cli("advise", path, "--format", "json")
    out = json.loads(r.out)
    assert r.code == 0 and [tuple(f) for f in out] == [KEYS] * len(out)
    assert {f["id"] for f in out} >= {"input_bound", "pageable_memcpy", "sync_in_step"}
    assert all(set(f["evidence"]) == {"text", "saving", "rows"} for f in out)
    r = cli("advise", fixture_path("h100_gpt6_fp32").parent.parent.parent / "x", "--verbose")  # not a profile
    assert r.code == 2
    assert_one_line_error(r.err)
    gpt = imported(fixture_path("h100_gpt6_bf16"), tmp_path_factory)
    r = cli("advise", gpt, "--verbose")
    assert "input_bound could not run: no data-loading phase was recorded" in r.out
    assert "No problem found by" in r.out and "no_tensor_cores" in r.out


def test_advise_rejects_a_bad_selection_in_one_line(cli, tmp_path_factory):
    path = imported(fixture_path("h100_gpt6_bf16"), tmp_path_factory)
    r = cli("advise", path, "--iter-start", "3", "--iter-stop", "1")
    assert r.code == 2
    assert_one_line_error(r.err)
    r = cli("advise", path, "--format", "yaml")
    assert r.code == 2
    assert_one_line_error(r.err)


def test_summary_shows_the_top_findings_and_json_holds_them_all(cli, tmp_path_factory):
    path = imported(fixture_path("h100_resnet50_phases"), tmp_path_factory)
    r = cli("summary", path)
    assert r.code == 0 and "Advice  (top 3 of" in r.out and "[input_bound]" in r.out
    r = cli("summary", path, "--format", "json")
    d = json.loads(r.out)
    ids = [f["id"] for f in d["advice"]]
    assert ids == [f.id for f in advice.evaluate(ProfileData.open(path))] and len(ids) > 3


def test_readme_lists_every_rule():
    readme = (REPO / "docs" / "advice.md").read_text()
    for rule in advice.RULES:
        assert f"| `{rule.id}` |" in readme, rule.id
    assert len({r.id for r in advice.RULES}) == len(advice.RULES)
