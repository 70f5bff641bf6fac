"""The nsys-equivalent reports, checked against nsys's own CSVs and against the SQLite export."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

import dlscope
from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.analysis.core.nsys_conventions import api_name_sql, half_up, megabytes
from dlscope.importers.base import ImportOptions
from dlscope.importers.run import import_files
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta
from dlscope.store.reader import open_profile

from .conftest import DATA, corpus_file

NSYS_GZ = DATA / "nsys" / "h100_nsys_mlp.sqlite.gz"
GROUND_TRUTH = DATA / "nsys" / "h100_nsys_mlp_stats"
DOMAINS_GZ = DATA / "nsys" / "h100_nsys_domains.sqlite.gz"
DOMAINS_TRUTH = DATA / "nsys" / "h100_nsys_domains_stats"
NSYS_REPORTS = ("cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum")


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    return import_files([NSYS_GZ], tmp_path_factory.mktemp("p") / "mlp.dlscope")


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    path = tmp_path_factory.mktemp("raw") / "mlp.sqlite"
    with gzip.open(NSYS_GZ, "rb") as g, open(path, "wb") as f:
        shutil.copyfileobj(g, f)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cpu") / "cpu.dlscope"
    with dlscope.profile(path) as prof:
        for _ in range(4):
            with prof.phase("run"), prof.phase("inner"):
                time.sleep(0.001)
            prof.step()
    return path


@pytest.mark.parametrize("report", NSYS_REPORTS)
def test_csv_equals_nsys_stats(cli, profile, report):
    """Acceptance: the CSV text is nsys's own, byte for byte (rows, order, integers, rounding)."""
    r = cli("stats", profile, "--report", report, "--format", "csv")
    assert r.code == 0, r.err
    assert r.out == (GROUND_TRUTH / f"nsysstats_{report}.csv").read_text()


@pytest.fixture(scope="module")
def domains_profile(tmp_path_factory) -> Path:
    return import_files([DOMAINS_GZ], tmp_path_factory.mktemp("d") / "domains.dlscope")


@pytest.mark.parametrize("report", NSYS_REPORTS + ("cuda_gpu_trace",))
def test_csv_equals_nsys_stats_with_domains_and_start_end_ranges(cli, domains_profile, report):
    """The second export (NVTX domains, start/end ranges ended on another thread, marks, a range
    never closed, pinned and pageable copies, every wait): nsys's CSVs again, the trace included."""
    r = cli("stats", domains_profile, "--report", report, "--format", "csv")
    assert r.code == 0, r.err
    assert r.out == (DOMAINS_TRUTH / f"nsysstats_{report}.csv").read_text()


@pytest.mark.parametrize("report", NSYS_REPORTS)
def test_default_ignores_steps_as_nsys_does(cli, tmp_path, report):
    """A profile with iterations (key node at import) still gives nsys's numbers by default."""
    p = import_files([NSYS_GZ], tmp_path / "kn.dlscope", ImportOptions(key_node="train_step"))
    r = cli("stats", p, "--report", report, "--format", "csv")
    assert r.out == (GROUND_TRUTH / f"nsysstats_{report}.csv").read_text()


def test_json_keeps_raw_values(cli, profile):
    r = cli("stats", profile, "--report", "cuda_gpu_mem_size_sum", "--format", "json")
    rows = json.loads(r.out)
    htod = next(x for x in rows if x["Operation"] == "[CUDA memcpy Host-to-Device]")
    assert htod["Total (MB)"] == 79716352 / 1e6 and htod["Count"] == 10
    r = cli("stats", profile, "--report", "cuda_api_sum", "--format", "json")
    first = json.loads(r.out)[0]
    assert first["Name"] == "cuLibraryLoadData" and first["Avg (ns)"] == 210702575 / 27


def test_cuda_gpu_trace_against_the_export(profile, raw):
    d = ProfileData.open(profile)
    try:
        res = REPORTS["cuda_gpu_trace"].compute(d)
    finally:
        d.close()
    t = res.table.to_pylist()
    expected = raw.execute("""
        SELECT start, end - start, correlationId, s.value, NULL, gridX, registersPerThread, streamId
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName
        UNION ALL
        SELECT start, end - start, correlationId, '[CUDA memcpy ' || o.label || ']', bytes, NULL, NULL, streamId
        FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind
        UNION ALL
        SELECT start, end - start, correlationId, '[CUDA memset]', bytes, NULL, NULL, streamId
        FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY 1""").fetchall()
    assert len(t) == len(expected) == 240
    got = [
        (
            r["Start (ns)"],
            r["Duration (ns)"],
            r["CorrId"],
            r["Name"],
            None if r["Bytes (MB)"] is None else round(r["Bytes (MB)"] * 1e6),
            r["GrdX"],
            r["Reg/Trd"],
            r["Strm"],
        )
        for r in t
    ]
    assert got == expected
    h2d = t[0]  # 32 MiB pageable copy: nsys's throughput is bytes * (1e9 // duration)
    assert h2d["Throughput (MB/s)"] == 33554432 * (1_000_000_000 // 4082388) / 1e6
    assert (h2d["SrcMemKd"], h2d["DstMemKd"], h2d["Device"]) == ("Pageable", "Device", "NVIDIA H100 80GB HBM3 (0)")
    memset = next(r for r in t if r["Name"] == "[CUDA memset]")
    assert (memset["SrcMemKd"], memset["DstMemKd"]) == ("Device", None)
    assert res.formats["Bytes (MB)"](h2d["Bytes (MB)"]) == "33.554"


def _kernels_launched_in(raw, first_step: int, last_step: int, key: str) -> int:
    """Independent count: kernels whose launching call starts in key-node iterations
    first_step..last_step (iteration i spans from the end of instance i-1 to the end of instance i)."""
    ends = [
        r[0]
        for r in raw.execute(
            "SELECT e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = ? ORDER BY e.end",
            (key,),
        )
    ]
    starts = [
        raw.execute(
            "SELECT min(e.start) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId WHERE s.value = ?", (key,)
        ).fetchone()[0]
    ] + ends[:-1]
    return raw.execute(
        """
        SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
        WHERE r.start >= ? AND r.start < ?""",
        (starts[first_step], ends[last_step]),
    ).fetchone()[0]


def test_selected_iterations_restrict_the_reports(cli, profile, raw):
    r = cli(
        "stats",
        profile,
        "--report",
        "cuda_gpu_kern_sum",
        "--key-node",
        "step",
        "--iter-start",
        "2",
        "--iter-stop",
        "3",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert sum(x["Instances"] for x in rows) == _kernels_launched_in(raw, 2, 3, "step") > 0
    assert abs(sum(x["Time (%)"] for x in rows) - 100) < 1e-9
    # nvtx_sum: one instance of each range in iteration 1, with its own duration
    r = cli(
        "stats",
        profile,
        "--report",
        "nvtx_sum",
        "--key-node",
        "step",
        "--iter-start",
        "1",
        "--iter-stop",
        "1",
        "--format",
        "json",
    )
    rows = {x["Range"]: x for x in json.loads(r.out)}
    second = dict(
        raw.execute(
            """
        SELECT ':' || s.value, end - start FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
        WHERE eventType = 59 AND e.start > (SELECT min(end) FROM NVTX_EVENTS WHERE textId = e2.id)
        AND e.start < (SELECT end FROM NVTX_EVENTS WHERE textId = e2.id ORDER BY end LIMIT 1 OFFSET 1)
        """.replace("e2.id", "(SELECT id FROM StringIds WHERE value = 'step')")
        ).fetchall()
    )
    assert {k: (v["Instances"], v["Total Time (ns)"]) for k, v in rows.items()} == {
        k: (1, v) for k, v in second.items()
    }


def test_cpu_only_profile(cli, cpu_profile):
    """dlscope's own phases appear in nvtx_sum; the GPU reports say there is no GPU data."""
    r = cli("stats", cpu_profile, "--report", "nvtx_sum", "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [(x["Style"], x["Range"], x["Instances"]) for x in rows] == [
        ("PushPop", ":run", 4),
        ("PushPop", ":inner", 4),
    ]
    d = ProfileData.open(cpu_profile)
    try:
        durs = [x[0] for x in d.con.execute("SELECT end_ns - start_ns FROM phases WHERE name = 'run'").fetchall()]
    finally:
        d.close()
    assert rows[0]["Total Time (ns)"] == sum(durs) and rows[0]["Min (ns)"] == min(durs)
    for name in (
        "cuda_gpu_kern_sum",
        "cuda_api_sum",
        "cuda_gpu_mem_time_sum",
        "cuda_gpu_mem_size_sum",
        "cuda_gpu_trace",
    ):
        r = cli("stats", cpu_profile, "--report", name)
        assert r.code == 2 and "has no" in r.err, (name, r.err)
    r = cli("stats", cpu_profile, "--format", "json")
    assert r.code == 0
    out = json.loads(r.out)
    assert out["cuda_gpu_trace"] == {"skipped": "the profile has no kernels or memcpy or memset data"}


def test_whole_command_range_is_not_an_nvtx_range(tmp_path):
    """dlscope's bookkeeping ranges (domains 'process' and 'trace') are left out; an NVTX domain
    that happens to be called 'process' is not."""
    b = ProfileBuilder()
    b.add(
        "phases",
        pa.table(
            {
                "rank": [0, 0, 0, 0],
                "pid": [1, 1, 1, 1],
                "tid": [1, 1, 2, 1],
                "start_ns": [0, 10, 20, 5],
                "end_ns": [1000, 30, 50, 900],
                "name": ["python train.py", "load", "work", "cupti window"],
                "kind": ["range"] * 4,
                "source": ["dlscope", "dlscope", "nvtx", "dlscope"],
                "domain": ["process", None, "process", "trace"],
                "style": [None, None, "startend", None],
            }
        ),
    )
    b.write(tmp_path / "p.dlscope", Meta(source="test"))
    d = ProfileData.open(tmp_path / "p.dlscope")
    try:
        rows = REPORTS["nvtx_sum"].compute(d).table.to_pylist()
    finally:
        d.close()
    assert [(r["Style"], r["Range"], r["Total Time (ns)"]) for r in rows] == [
        ("StartEnd", "process:work", 30),
        ("PushPop", ":load", 20),
    ]


@pytest.mark.parametrize(
    "selection",
    [
        Selection(),
        Selection(key_node="step"),
        Selection(iter_start=1, iter_stop=2, key_node="train_step"),
        Selection(iter_start=90, key_node="step"),
    ],
)
def test_every_report_runs_on_the_nsys_profile(profile, selection):
    d = ProfileData(open_profile(profile), selection)
    try:
        for name, rep in REPORTS.items():
            if rep.missing(d) is None and not (rep.needs_steps and not d.scalar("SELECT count(*) FROM steps")):
                res = rep.compute(d)
                assert res.table.num_columns, name
    finally:
        d.close()


def test_half_up_is_sqlite_round():
    f = half_up(1)
    assert [f(x) for x in (1418.75, 2784.25, 0.25, 65.0, 7803799.149999, 0.04999)] == [
        "1418.8",
        "2784.3",
        "0.3",
        "65.0",
        "7803799.1",
        "0.0",
    ]
    assert f(None) == "" and megabytes(3)(33.554432) == "33.554"


def test_api_name_rule():
    names = ["cudaLaunchKernel_v7000", "cudaStreamIsCapturing_v10000", "cuGetProcAddress_v2", "cudaMalloc", "x_v12"]
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT unnest($1) AS name, generate_subscripts($1, 1) AS i", [names])
    got = [r[0] for r in con.execute(f"SELECT {api_name_sql('name')} FROM t ORDER BY i").fetchall()]
    assert got == ["cudaLaunchKernel", "cudaStreamIsCapturing_v10000", "cuGetProcAddress_v2", "cudaMalloc", "x_v12"]


def test_reports_on_a_sparse_profile(tmp_path):
    """A source that fills only the required columns (no grid, no kinds, no devices, no
    correlation ids) still gets every nsys report, with empty cells where data is missing."""
    b = ProfileBuilder()
    b.add("kernels", pa.table({"rank": [0, 0], "start_ns": [100, 300], "end_ns": [200, 350], "name": ["k", "k"]}))
    b.add(
        "memcpy", pa.table({"rank": [0], "start_ns": [150], "end_ns": [160], "bytes": [4096], "copy_kind": ["unknown"]})
    )
    b.add("memset", pa.table({"rank": [0], "start_ns": [170], "end_ns": [170], "bytes": [0]}))
    b.add(
        "api", pa.table({"rank": [0], "start_ns": [90], "end_ns": [95], "name": ["cuLaunchKernel"], "kind": ["driver"]})
    )
    b.write(tmp_path / "s.dlscope", Meta(source="test"))
    d = ProfileData.open(tmp_path / "s.dlscope")
    try:
        out = {
            n: REPORTS[n].compute(d)
            for n in (
                "cuda_gpu_kern_sum",
                "cuda_api_sum",
                "cuda_gpu_mem_time_sum",
                "cuda_gpu_mem_size_sum",
                "cuda_gpu_trace",
            )
        }
        assert REPORTS["nvtx_sum"].missing(d) == "the profile has no phases data"
    finally:
        d.close()
    k = out["cuda_gpu_kern_sum"].table.to_pylist()
    assert k == [
        {
            "Time (%)": 100.0,
            "Total Time (ns)": 150,
            "Instances": 2,
            "Avg (ns)": 75.0,
            "Med (ns)": 75.0,
            "Min (ns)": 50,
            "Max (ns)": 100,
            "StdDev (ns)": pytest.approx(35.35533905932738),
            "Name": "k",
        }
    ]
    ops = [r["Operation"] for r in out["cuda_gpu_mem_time_sum"].table.to_pylist()]
    assert ops == ["[CUDA memcpy Unknown]", "[CUDA memset]"]
    trace = out["cuda_gpu_trace"].table.to_pylist()
    assert [r["Start (ns)"] for r in trace] == [0, 50, 70, 200]  # from the first GPU event
    memset = trace[2]
    assert memset["Throughput (MB/s)"] is None and memset["SrcMemKd"] is None and memset["Device"] is None


KINETO = DATA / "kineto" / "h100_resnet50_phases.trace.json.gz"


@pytest.fixture(scope="module")
def kineto_events() -> list[dict]:
    return json.loads(gzip.decompress(KINETO.read_bytes()))["traceEvents"]


@pytest.fixture(scope="module")
def kineto_profile(tmp_path_factory) -> Path:
    return import_files([KINETO], tmp_path_factory.mktemp("k") / "rn50.dlscope")


def _json(cli, path, report, *args):
    r = cli("stats", path, "--report", report, "--format", "json", *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_reports_on_a_kineto_profile(cli, kineto_profile, kineto_events):
    """Counts and totals checked against the trace JSON itself."""
    by_cat: dict[str, list[dict]] = {}
    for e in kineto_events:
        by_cat.setdefault(e.get("cat"), []).append(e)
    kern = _json(cli, kineto_profile, "cuda_gpu_kern_sum")
    assert sum(r["Instances"] for r in kern) == len(by_cat["kernel"])
    assert sum(r["Total Time (ns)"] for r in kern) == pytest.approx(
        sum(e["dur"] for e in by_cat["kernel"]) * 1e3, abs=len(by_cat["kernel"])
    )
    api = {r["Name"]: r for r in _json(cli, kineto_profile, "cuda_api_sum")}
    launches = [e for e in by_cat["cuda_runtime"] if e["name"] == "cudaLaunchKernel"]
    assert api["cudaLaunchKernel"]["Num Calls"] == len(launches)
    assert sum(r["Num Calls"] for r in api.values()) == len(by_cat["cuda_runtime"]) + len(by_cat["cuda_driver"])
    mem = {r["Operation"]: r for r in _json(cli, kineto_profile, "cuda_gpu_mem_time_sum")}
    assert mem["[CUDA memcpy Host-to-Device]"]["Count"] == 6 and mem["[CUDA memcpy Device-to-Host]"]["Count"] == 3
    assert mem["[CUDA memset]"]["Count"] == len(by_cat["gpu_memset"])
    size = {r["Operation"]: r for r in _json(cli, kineto_profile, "cuda_gpu_mem_size_sum")}
    exp_bytes = sum(e["args"]["bytes"] for e in by_cat["gpu_memcpy"] if "HtoD" in e["name"])
    assert size["[CUDA memcpy Host-to-Device]"]["Total (MB)"] == pytest.approx(exp_bytes / 1e6)
    nvtx = {r["Range"]: r for r in _json(cli, kineto_profile, "nvtx_sum")}
    for name in ("preprocess", "train_step", "postprocess"):
        exp = [e["dur"] for e in by_cat["user_annotation"] if e["name"] == name]
        assert nvtx[":" + name]["Instances"] == len(exp) == 3
        assert nvtx[":" + name]["Max (ns)"] == pytest.approx(max(exp) * 1e3, abs=1)
    trace = _json(cli, kineto_profile, "cuda_gpu_trace")
    assert len(trace) == len(by_cat["kernel"]) + len(by_cat["gpu_memcpy"]) + len(by_cat["gpu_memset"])
    assert [r["Start (ns)"] for r in trace] == sorted(r["Start (ns)"] for r in trace)


def test_kineto_profile_step_selection(cli, kineto_profile, kineto_events):
    """--iter-start/--iter-stop keep the kernels launched in ProfilerStep#3, found here from the
    JSON's own correlation ids."""
    step3 = next(e for e in kineto_events if e.get("name") == "ProfilerStep#3")
    lo, hi = step3["ts"], step3["ts"] + step3["dur"]
    launched = {
        e["args"]["correlation"]
        for e in kineto_events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and lo <= e["ts"] < hi
    }
    exp = sum(1 for e in kineto_events if e.get("cat") == "kernel" and e["args"]["correlation"] in launched)
    kern = _json(cli, kineto_profile, "cuda_gpu_kern_sum", "--iter-start", "3", "--iter-stop", "3")
    assert sum(r["Instances"] for r in kern) == exp > 0
    whole = _json(cli, kineto_profile, "cuda_gpu_kern_sum")
    assert sum(r["Instances"] for r in whole) > exp


def test_two_ranks_add_up(cli, tmp_path):
    """Two exports, ranks from their names: nsys's summaries over both are each count doubled."""
    files = []
    for r in (0, 1):
        f = tmp_path / f"mlp_rank{r}.sqlite.gz"
        f.write_bytes(NSYS_GZ.read_bytes())
        files.append(f)
    p = import_files(files, tmp_path / "two.dlscope")
    d = ProfileData.open(p)
    try:
        assert d.meta.ranks == [0, 1] and len(d.meta.devices) == 1 and len(d.meta.clock["nsys"]) == 2
        assert d.scalar("SELECT count(DISTINCT rank) FROM kernels") == 2
    finally:
        d.close()
    both = _json(cli, p, "cuda_gpu_kern_sum")
    truth = (GROUND_TRUTH / "nsysstats_cuda_gpu_kern_sum.csv").read_text().splitlines()[1:]
    assert [r["Instances"] for r in both] == [2 * int(line.split(",")[2]) for line in truth]


# traces written by others that stress the reports: AMD, MTIA, CPU-only, no phases, Triton, event syncs
CORPUS_SAMPLE = (
    "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "mtia_trace_single_rank/mtia_rank_0.json.gz",
    "cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "trace_file_list/inference_rank_1.json.gz",
    "triton_example/triton_example.json.gz",
    "critical_path/cuda_event_sync/event_sync_trace.json.gz",
)


@pytest.mark.parametrize("name", CORPUS_SAMPLE)
def test_reports_on_corpus_traces(cli, tmp_path, name):
    path = corpus_file(name)
    out = tmp_path / "c.dlscope"
    assert cli("import", path, "-o", out).code == 0
    wanted = ",".join(NSYS_REPORTS + ("cuda_gpu_trace",))
    first = ProfileData.open(out).scalar("SELECT min(step) FROM steps")
    sels = [[]] + ([["--iter-start", str(first), "--iter-stop", str(first)]] if first is not None else [])
    for sel in sels:  # the whole trace, and its first iteration alone
        r = cli("stats", out, "--report", wanted, "--format", "json", *sel)
        assert r.code == 0, r.err
        for rows in json.loads(r.out).values():
            assert isinstance(rows, list) or set(rows) == {"skipped"}
    if first is not None:  # a range past the trace's iterations is a bad flag
        r = cli("stats", out, "--report", wanted, "--iter-start", str(first + 10_000))
        assert r.code == 2 and "select no step" in r.err
