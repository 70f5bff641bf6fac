"""dlscope.open: the analysis API gives what the command line gives (one code path), as Arrow,
pandas and dataclasses, and shows itself in a notebook without a script."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import dlscope
from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData

DATA = Path(__file__).parent / "data"
SINGLE = DATA / "advice_truth_hooks" / "gpt2_baseline_default.dlscope"
JOB = DATA / "advice_truth_dist" / "ddp2_straggler.dlscope"
NCU = DATA / "gpu_h100" / "torch_ncu.dlscope"  # has Nsight Compute's kernel_metrics
FSDP = DATA / "advice_truth_dist" / "fsdp4_balanced_a.dlscope"
FULL = DATA / "roofline" / "gpt_bf16_full.dlscope"  # full mode: input shapes (the roofline)
MODULES = DATA / "module_view" / "gpt_cpu.dlscope"  # module calls (the modules report)


def _profile_for(report: str) -> Path | None:
    for path in (SINGLE, JOB, NCU, FSDP, FULL, MODULES):
        if REPORTS[report].missing(ProfileData.open(path)) is None:
            return path
    return None


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_every_report_equals_the_cli_json(name, cli):
    path = _profile_for(name)
    if path is None:
        pytest.fail(f"{name}: no bundled real profile has its data")
    with dlscope.open(path) as p:
        got = p.report(name).rows()
    r = cli("stats", path, "--report", name, "--format", "json")
    assert r.code == 0, r.err
    assert _same(got, json.loads(r.out)), (got[:3], json.loads(r.out)[:3])


def _same(a, b) -> bool:
    """Equal, floats to 1e-9 relative: DuckDB's parallel sums and averages of floats may differ in
    the last digit from one run to the next (the order of the partial sums)."""
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_summary_advice_sql_tables_and_diff_match_the_cli(cli):
    with dlscope.open(SINGLE) as p:
        summary = json.loads(cli("summary", SINGLE, "--format", "json").out)
        summary.pop("advice")  # the CLI's JSON adds the findings, which advise() gives
        assert json.loads(json.dumps(p.summary().as_dict(), default=str)) == summary
        found = p.advise()
        advised = json.loads(cli("advise", SINGLE, "--format", "json").out)
        advised = advised.get("findings", advised) if isinstance(advised, dict) else advised
        assert [f.id for f in found] == [f["id"] for f in advised]
        assert [round(f.saving_pct or 0, 6) for f in found] == [round(f["saving_pct"] or 0, 6) for f in advised]
        assert all(f.what_if for f in p.advise(what_if=True))
        n = p.sql("select count(*) as n from kernels").to_pylist()[0]["n"]
        assert n == json.loads(cli("sql", SINGLE, "select count(*) as n from kernels", "--format", "json").out)[0]["n"]
        kernels = p.table("kernels", "pandas")
        assert len(kernels) == n and "name" in kernels.columns  # names decoded
        d = p.diff(DATA / "advice_truth_hooks" / "gpt2_bf16_default.dlscope")
        assert (
            d.as_dict()["step_time"]
            == json.loads(
                cli("diff", SINGLE, DATA / "advice_truth_hooks" / "gpt2_bf16_default.dlscope", "--format", "json").out
            )["step_time"]
        )


def test_a_folder_or_glob_spans_every_profile():
    from dlscope.errors import UsageError

    with dlscope.open(str(DATA / "advice_truth_dist" / "*.dlscope")) as p:
        rows = p.sql("select count(distinct profile) as n from steps").to_pylist()
        assert rows == [{"n": len(list((DATA / "advice_truth_dist").glob("*.dlscope")))}]
        with pytest.raises(UsageError):
            _ = p.data  # one profile's data: summary() and the rest come by profile


def test_notebook_views_are_html_without_script():
    with dlscope.open(SINGLE) as p:
        pages = [p._repr_html_(), p.report("cuda_gpu_kern_sum")._repr_html_(), p.advise()._repr_html_()]
    for page in pages:
        assert page.startswith('<div class="dlscope"><style>') and "<script" not in page.lower()
        assert "body {" not in page and ":root" not in page  # the report's page rules stay scoped
    assert "<svg" in pages[0] and "amp_not_enabled" in pages[0]  # step-time plot and the top finding


@pytest.mark.parametrize("name", ["step_sum", "cuda_gpu_kern_sum", "cuda_gpu_trace"])  # 29, 49, 11k rows
def test_print_of_a_report_shows_its_table_as_text(name):
    """print(p.report(NAME)) and the REPL showed the dataclass, formatters included
    (``<function fixed.<locals>.fmt ...>``): now the table as ``dlscope stats`` prints it."""
    from dlscope.render.notebook import MAX_ROWS
    from dlscope.render.tables import _human  # what `dlscope stats` shows of a column without a format

    with dlscope.open(SINGLE) as p:
        r = p.report(name)
    text = str(r)
    assert repr(r) == text and "<function" not in text and "formats=" not in text
    lines = text.splitlines()
    assert lines[0] == f"{name}: {r.title}"
    assert lines[1].split() == " ┃ ".join(r.table.column_names).split()  # the header: every column, unfolded
    shown = min(r.table.num_rows, MAX_ROWS)
    rows = [ln.split("│") for ln in lines[3 : 3 + shown]]
    for got, want in zip(rows, r.table.slice(0, shown).to_pylist()):  # each cell as the report formats it
        assert [c.strip() for c in got] == ["" if v is None else r.formats.get(c, _human)(v) for c, v in want.items()]
    more = r.table.num_rows - shown
    assert (f"{more:,} more rows" in lines[3 + shown]) if more else len(lines) == 3 + shown + len(r.notes)


def test_bad_paths_and_names_are_one_line_errors():
    from dlscope.errors import InputError, UsageError

    with pytest.raises(InputError):
        dlscope.open("/no/such/profile.dlscope")
    with dlscope.open(SINGLE) as p:
        with pytest.raises(UsageError):
            p.report("no_such_report")
        with pytest.raises(UsageError):
            p.table("no_such_table")


def test_a_diff_shows_in_a_notebook_with_the_step_change_it_explains():
    """dlscope.open(a).diff(b) is the CLI's diff (its JSON) and shows, in a notebook, the HTML diff's
    cards, step times, the explained change of the mean step time, and the advice; no script."""
    from dlscope.render.diff_numbers import change

    other = DATA / "advice_truth_hooks" / "gpt2_bf16_default.dlscope"
    with dlscope.open(SINGLE) as p:
        d = p.diff(other)
        html = d._repr_html_()
    assert f"What changed the mean step time ({change(d.total_delta_ms)} ms)" in html
    assert "<script" not in html.lower() and 'class="dlscope"' in html
    assert sum(c.delta for c in d.explain) == pytest.approx(d.total_delta_ms, rel=1e-6)


def test_a_folder_of_one_jobs_traces_is_one_profile(cli, tmp_path):
    """dlscope.open(a folder of per-rank Kineto traces) imports them into one profile, as
    ``dlscope import FOLDER`` does, so that summary, advise and the reports work on the job (issue
    39: it was taken for a folder of profiles and found none)."""
    traces = DATA / "hta_corpus" / "trace_filter"  # ranks 0 and 1 of a real NCCL job
    out = tmp_path / "job.dlscope"
    assert cli("import", traces, "-o", out).code == 0
    with dlscope.open(traces) as p:
        assert sorted(p.data.meta.ranks) == [0, 1]
        summary = json.loads(cli("summary", out, "--format", "json").out)
        summary.pop("advice")
        got = json.loads(json.dumps(p.summary().as_dict(), default=str))
        assert got.pop("profile").endswith("imported.dlscope") and summary.pop("profile") == str(out)
        assert got == summary
        advised = json.loads(cli("advise", out, "--format", "json").out)
        advised = advised.get("findings", advised) if isinstance(advised, dict) else advised
        assert [f.id for f in p.advise()] == [f["id"] for f in advised]
        for name in ("comm_sum", "straggler"):
            want = json.loads(cli("stats", out, "--report", name, "--format", "json").out)
            assert _same(p.report(name).rows(), want)


def test_a_folder_of_profiles_gives_each_profiles_summary_advice_and_reports():
    """On a folder or glob of profiles, summary(), advise() and report() give each profile's
    result by its path, the same as opening that profile alone (issue 39)."""
    spec = str(DATA / "advice_truth_dist" / "ddp2_*.dlscope")
    with dlscope.open(spec) as p:
        summaries, findings, reports = p.summary(), p.advise(), p.report("straggler")
    paths = sorted(str(q) for q in (DATA / "advice_truth_dist").glob("ddp2_*.dlscope"))
    assert len(paths) >= 2 and sorted(summaries) == sorted(findings) == sorted(reports) == paths
    for path in paths:
        with dlscope.open(path) as one:
            assert summaries[path].as_dict() == one.summary().as_dict()
            assert [f.id for f in findings[path]] == [f.id for f in one.advise()]
            assert _same(reports[path].rows(), one.report("straggler").rows())
