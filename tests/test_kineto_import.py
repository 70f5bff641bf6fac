"""Kineto import on the real H100 traces, checked against an independent reading of the JSON,
and on every file of the HTA corpus."""

from __future__ import annotations

import gzip
import json

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize
from dlscope.importers.run import import_files

from . import kineto_reference as ref
from .conftest import DATA, assert_one_line_error, corpus_file, corpus_files, corpus_id, q

FIXTURES = ["h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    out = {}
    root = tmp_path_factory.mktemp("kineto")
    for name in FIXTURES:
        src = DATA / "kineto" / f"{name}.trace.json.gz"
        out[name] = (import_files([src], root / f"{name}.dlscope"), ref.load(src))
    return out


@pytest.mark.parametrize("name", FIXTURES)
def test_kernel_counts_and_times_equal_the_json(imported, name):
    path, doc = imported[name]
    expected = ref.kernel_totals(doc)
    con = ProfileData.open(path).con
    got = {
        n: (c, d)
        for n, c, d in q(con, "SELECT name, count(*), sum(end_ns - start_ns)::BIGINT FROM kernels GROUP BY name")
    }
    assert got == expected
    assert len(expected) > 10


@pytest.mark.parametrize("name", FIXTURES)
def test_every_kernel_links_to_its_launch_and_its_op(imported, name):
    path, doc = imported[name]
    con = ProfileData.open(path).con
    n, launched, with_op = q(
        con,
        """
        SELECT count(*),
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM api a WHERE a.correlation_id = k.correlation_id)),
               count(*) FILTER (WHERE EXISTS (SELECT 1 FROM ops o WHERE o.external_id = k.external_id))
        FROM kernels k""",
    )[0]
    # the JSON's own links: correlation to a runtime/driver event, External id to an op
    corr = {e["args"]["correlation"] for c in ("cuda_runtime", "cuda_driver") for e in ref.events(doc, c)}
    ext = {e["args"]["External id"] for e in ref.events(doc, "cpu_op")}
    ks = ref.events(doc, "kernel")
    assert n == len(ks)
    assert launched == sum(1 for k in ks if k["args"].get("correlation") in corr)
    assert with_op == sum(1 for k in ks if k["args"].get("External id") in ext)
    assert with_op == n  # in these traces every kernel has its op


def test_steps_equal_profiler_step_spans(imported):
    path, doc = imported["h100_resnet50_phases"]
    con = ProfileData.open(path).con
    got = q(con, "SELECT step, start_ns, end_ns FROM steps ORDER BY step")
    assert got == ref.profiler_steps(doc) and len(got) == 3


def test_resnet_phases_with_their_gpu_activity(imported):
    path, doc = imported["h100_resnet50_phases"]
    s = summarize(ProfileData.open(path))
    phases = {p.name: p for p in s.phases}
    for name in ("preprocess", "train_step", "postprocess", "forward", "backward", "optimizer"):
        assert name in phases, list(phases)
    # independent: GPU time of work whose runtime call started inside train_step
    runtime = {
        e["args"]["correlation"]: ref.ns(doc, e["ts"])
        for c in ("cuda_runtime", "cuda_driver")
        for e in ref.events(doc, c)
    }
    spans = [
        (ref.ns(doc, e["ts"]), ref.ns(doc, e["ts"]) + int(e["dur"] * 1000))
        for e in ref.events(doc, "user_annotation")
        if e["name"] == "train_step"
    ]
    gpu = 0
    for cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        for e in ref.events(doc, cat):
            t = runtime.get(e["args"].get("correlation"))
            if t is not None and any(a <= t < b for a, b in spans):
                gpu += int(e["dur"] * 1000)
    # per step, over the 3 traced steps
    assert phases["train_step"].gpu_ms == pytest.approx(gpu / 1e6 / 3, abs=1e-6)
    assert phases["train_step"].kernels > 500
    assert phases["preprocess"].gpu_ms > 0  # the pageable host-to-device copy
    # derived phases sit inside train_step, in order, and backward is the longest
    assert phases["forward"].depth == phases["backward"].depth == 1
    assert phases["backward"].total_ms > phases["forward"].total_ms


def test_trace_with_optimizer_but_no_profiler_steps_gets_optimizer_iterations(imported):
    path, doc = imported["h100_gpt6_bf16"]
    con = ProfileData.open(path).con
    opt_ends = sorted(
        ref.ns(doc, e["ts"]) + int(e["dur"] * 1000)
        for e in ref.events(doc, "user_annotation")
        if e["name"].startswith("Optimizer.step#")
    )
    assert [r[0] for r in q(con, "SELECT end_ns FROM steps ORDER BY step")] == opt_ends
    assert q(con, "SELECT DISTINCT source FROM steps") == [("optimizer",)]


def test_multi_rank_directory(tmp_path):
    src = corpus_file("trace_filter")
    p = import_files([src], tmp_path / "mr.dlscope")
    data = ProfileData.open(p)
    assert data.meta.ranks == [0, 1]
    for rank, f in ((0, "sampled_rank-0.json.gz"), (1, "sampled_rank-1.json.gz")):
        doc = ref.load(src / f)
        assert q(data.con, f"SELECT count(*) FROM kernels WHERE rank = {rank}")[0][0] == len(ref.events(doc, "kernel"))


@pytest.mark.parametrize("path", corpus_files(), ids=corpus_id)
def test_every_corpus_file_imports_and_summarizes(cli, tmp_path, path):
    out = tmp_path / "c.dlscope"
    r = cli("import", path, "-o", out)
    assert r.code == 0, r.err
    r = cli("summary", out, "--format", "json")
    assert r.code == 0, r.err
    s = json.loads(r.out)
    assert set(s["layers"]) == {"application", "framework", "runtime", "hardware"}


def test_ns_resolution_timestamps_are_exact(tmp_path):
    src = corpus_file("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    doc = ref.load(src)
    con = ProfileData.open(import_files([src], tmp_path / "ns.dlscope")).con
    want = sorted(ref.ns(doc, e["ts"]) for e in ref.events(doc, "kernel"))
    assert want and any(w % 1000 for w in want)  # kernels with sub-microsecond starts to check
    assert [r[0] for r in q(con, "SELECT start_ns FROM kernels ORDER BY start_ns")] == want


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"traceEvents": [',
        b'{"hello": 1}',
        b"not json at all",
        b'{"traceEvents": [{"ph": "X", "ts": 1,',
    ],
)
def test_bad_traces_exit_2_with_one_line(cli, tmp_path, content):
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    r = cli("import", f, "-o", tmp_path / "o.dlscope")
    assert r.code == 2, r
    assert_one_line_error(r.err)
    assert not (tmp_path / "o.dlscope").exists()


def test_truncated_gzip_exits_2(cli, tmp_path):
    data = (DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz").read_bytes()
    f = tmp_path / "cut.json.gz"
    f.write_bytes(data[: len(data) // 2])
    r = cli("import", f, "-o", tmp_path / "o.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


def test_chrome_array_format_and_plain_json(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k",
            "pid": 0,
            "tid": 7,
            "ts": 10.5,
            "dur": 2,
            "args": {"device": 0, "stream": 7, "correlation": 1},
        }
    ]
    f = tmp_path / "arr.json"
    f.write_text(json.dumps(events))
    con = ProfileData.open(import_files([f], tmp_path / "a.dlscope")).con
    assert q(con, "SELECT name, start_ns, end_ns, stream FROM kernels") == [("k", 10500, 12500, 7)]
    g = tmp_path / "obj.json.gz"
    with gzip.open(g, "wt") as fh:
        json.dump({"traceEvents": events, "INFO": ["x]", "y"], "baseTimeNanoseconds": 1000}, fh)
    con = ProfileData.open(import_files([g], tmp_path / "b.dlscope")).con
    assert q(con, "SELECT start_ns FROM kernels") == [(11500,)]


def test_key_node_at_import_tiles_the_run_from_the_named_annotation(tmp_path):
    """--key-node train_step: iteration i ends where the i-th train_step ends and starts where
    the previous one ended (DLProf), computed here from the JSON by hand."""
    from dlscope.importers.base import ImportOptions

    src = DATA / "kineto" / "h100_resnet50_phases.trace.json.gz"
    doc = ref.load(src)
    spans = sorted(
        (ref.ns(doc, e["ts"]), ref.ns(doc, e["ts"]) + int(ref.Decimal(e["dur"]) * 1000))
        for e in ref.events(doc, "user_annotation")
        if e["name"] == "train_step"
    )
    ends = sorted(e for _, e in spans)
    expected = [(i, spans[0][0] if i == 0 else ends[i - 1], e, "key_node") for i, e in enumerate(ends)]
    path = import_files([src], tmp_path / "kn.dlscope", ImportOptions(key_node="train_step"))
    got = q(ProfileData.open(path).con, "SELECT step, start_ns, end_ns, source FROM steps ORDER BY step")
    assert [tuple(r) for r in got] == expected and len(expected) == 3
