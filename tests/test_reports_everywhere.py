"""Every registered report on every file of HTA's corpus and on the fixtures: it runs, or says
why it cannot (Report.needs); never a traceback. Numbers are checked in each report's own tests."""

from __future__ import annotations

import json

import pytest

from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData, Selection

from .conftest import corpus_files, corpus_id
from .report_helpers import fixture_path, imported

FIXTURES = ["h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16"]


def _check_all_reports(cli, path) -> dict:
    r = cli("stats", path, "--report", "all", "--format", "json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert set(out) == set(REPORTS)
    data = ProfileData.open(path)
    for name, rep in REPORTS.items():
        why = rep.missing(data)
        if why:
            assert out[name] == {"skipped": why}
        else:
            assert isinstance(out[name], list), name
    return out


@pytest.mark.parametrize("path", corpus_files(), ids=corpus_id)
def test_every_report_on_every_corpus_file(cli, tmp_path_factory, path):
    _check_all_reports(cli, imported(path, tmp_path_factory))


@pytest.mark.parametrize("name", FIXTURES)
def test_every_report_on_the_fixtures_and_a_narrow_selection(cli, tmp_path_factory, name):
    path = imported(fixture_path(name), tmp_path_factory)
    out = _check_all_reports(cli, path)
    # every report that can run on a trace with every layer (no hardware counters) has rows
    ran = {k: v for k, v in out.items() if k != "step_sum" and not (isinstance(v, dict) and "skipped" in v)}
    assert all(isinstance(v, list) and v for v in ran.values()), {k: v for k, v in ran.items() if not v}
    # no counters, no ncu, one rank without collectives; the GPT traces were recorded without shapes
    no_shapes = {"roofline"} if "gpt6" in name else set()
    assert (
        set(out) - set(ran)
        <= {
            "step_sum",
            "gpu_metrics",
            "kernel_metrics",
            "comm_sum",
            "overlap",
            "straggler",
            "fsdp_units",
            "memory_by_rank",
            "rank_waits",
            "collective_overlap",
            "rank_balance",
            "modules",  # module calls come from dlscope's own recordings, not from imported traces
        }
        | no_shapes
    )
    if no_shapes:
        assert "--mode full" in out["roofline"]["skipped"]
    # one step only, then a selection with no steps at all: reports still answer
    first = ProfileData.open(path).scalar("SELECT min(step) FROM steps")
    for sel in (Selection(iter_start=first, iter_stop=first), Selection(iter_start=10_000)):
        data = ProfileData.open(path, sel)
        for rep in REPORTS.values():
            if rep.name != "step_sum" and not rep.missing(data):
                rep.compute(data)
