"""`dlscope diff` and `dlscope check` on the command line: formats, the HTML view, exit codes."""

from __future__ import annotations

import json
import re

import pytest

from dlscope.importers.run import import_files

from .conftest import CORPUS, DATA, assert_one_line_error, need_file

FP32 = DATA / "kineto" / "h100_gpt6_fp32.trace.json.gz"
BF16 = DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz"


def test_diff_reads_traces_directly_text_and_json(cli):
    r = cli("diff", FP32, BF16, "--no-advice", "--top", "5")
    assert r.code == 0, r.err
    assert "What changed the mean step time" in r.out and "aten::mm" in r.out
    r = cli("diff", FP32, BF16, "--format", "json", "--no-advice")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["a"] == str(FP32) and d["b"] == str(BF16)
    assert sum(x["delta"] for x in d["explain"]) == pytest.approx(d["total_delta_ms"], rel=1e-9)
    assert {x["stat"] for x in d["step_time"]} == {"p50", "p95", "p99", "mean"}
    assert any(x["op"] == "aten::mm" for x in d["op_links"])


def test_diff_html_is_self_contained_and_escaped(cli, tmp_path):
    out = tmp_path / "diff.html"
    r = cli("diff", FP32, BF16, "--format", "html", "-o", out, "--no-advice")
    assert r.code == 0, r.err
    page = out.read_text()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert "<script" not in page.lower() and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    # kernel names carry C++ templates: they must arrive escaped
    assert "&lt;" in page and not re.search(r"<(float|cutlass|at::)", page)
    assert page.count("<svg") >= 1 and "step time (ms)" in page
    r = cli("diff", FP32, BF16, "--format", "html", "-o", out)
    assert r.code == 2 and "exists" in r.err  # no overwrite without -f
    assert_one_line_error(r.err)


@pytest.fixture(scope="module")
def resnet_summary(tmp_path_factory, resnet_profile):
    from dlscope.cli import main

    d = tmp_path_factory.mktemp("summary")
    path = d / "summary.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["summary", str(resnet_profile), "--format", "json"]) == 0
    path.write_text(buf.getvalue())
    return path


def test_check_against_itself_is_ok(cli, resnet_profile):
    r = cli("check", resnet_profile, "--baseline", resnet_profile, "--metric", "step_p50,step_mean,throughput")
    assert r.code == 0, r.out + r.err
    assert [ln.split()[0] for ln in r.out.strip().splitlines()] == ["ok", "ok", "ok"]


def test_check_against_a_summary(cli, resnet_profile, resnet_summary, tmp_path):
    r = cli("check", resnet_profile, "--baseline", resnet_summary)
    assert r.code == 0, r.out + r.err
    # a baseline whose median step was 100 ms: the profile's 3 steps (120-145 ms) are a regression
    doc = json.loads(resnet_summary.read_text())
    doc["steps"]["p50_ms"] = 100.0
    faster = tmp_path / "faster.json"
    faster.write_text(json.dumps(doc))
    r = cli("check", resnet_profile, "--baseline", faster, "--max-regression", "10%")
    assert r.code == 1
    lines = r.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("REGRESSION step_p50:") and "limit 10%" in lines[0]
    # allowed up to 50%: not a regression any more
    assert cli("check", resnet_profile, "--baseline", faster, "--max-regression", "50").code == 0


def test_check_json_output(cli, resnet_profile):
    r = cli("check", resnet_profile, "--baseline", resnet_profile, "--format", "json")
    assert r.code == 0
    d = json.loads(r.out)
    assert d["regressed"] is False and d["metrics"][0]["metric"] == "step_p50"


def test_check_finds_the_hta_regression(cli, tmp_path):
    control = need_file(CORPUS / "trace_diff" / "control")
    test = need_file(CORPUS / "trace_diff" / "test")
    a = import_files([control], tmp_path / "control.dlscope")
    r = cli("check", test, "--baseline", a, "--metric", "step_p50,throughput")
    assert r.code == 1
    lines = r.out.strip().splitlines()
    assert lines[0].startswith("REGRESSION step_p50:") and lines[1].startswith("REGRESSION throughput:")
    assert cli("check", a, "--baseline", test).code == 0  # the other way round it got faster


@pytest.mark.parametrize(
    "args",
    [
        ("check", "missing.dlscope", "--baseline", "{profile}"),
        ("check", "{profile}", "--baseline", "missing.dlscope"),
        ("check", "{profile}", "--baseline", "{profile}", "--max-regression", "lots"),
        ("check", "{profile}", "--baseline", "{profile}", "--max-regression", "-5%"),
        ("check", "{profile}", "--baseline", "{profile}", "--metric", "step_p42"),
        ("check", "{profile}", "--baseline", "{notsummary}"),
        ("check", "{profile}", "--baseline", "{corrupt}"),
        ("check", "{profile}"),
        ("diff", "{profile}", "missing.dlscope"),
        ("diff", "{profile}", "{corrupt}"),
        ("diff", "{profile}", "{profile}", "--top", "0"),
        ("diff", "{profile}", "{profile}", "--format", "html", "-o", "{tmp}/diff.txt"),
    ],
)
def test_bad_input_is_one_line_exit_2(cli, resnet_profile, tmp_path, args):
    (tmp_path / "not_summary.json").write_text('{"hello": 1}')
    (tmp_path / "corrupt.json").write_text('{"steps": ')
    subs = {
        "{profile}": str(resnet_profile),
        "{notsummary}": str(tmp_path / "not_summary.json"),
        "{corrupt}": str(tmp_path / "corrupt.json"),
        "{tmp}": str(tmp_path),
    }
    argv = []
    for a in args:
        for k, v in subs.items():
            a = a.replace(k, v)
        argv.append(a)
    r = cli(*argv)
    assert r.code == 2, (argv, r.out, r.err)
    assert_one_line_error(r.err)


def test_diff_reads_nsys_exports(cli):
    nsys = DATA / "nsys" / "h100_nsys_domains.sqlite.gz"
    r = cli("diff", nsys, nsys, "--format", "json", "--no-advice")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["total_delta_ms"] is None and d["explain"] == []  # no iterations in this capture
    assert any("has no steps" in n and "--key-node" in n for n in d["notes"])
    assert d["kernels"] and all(k["status"] == "matched" and k["delta"] == 0 for k in d["kernels"])
