"""The exported timeline, checked against the real H100 trace it came from (counted with plain
Python), read back, and cut by steps, by event count and into parts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.render.timeline import StepWindow, TimelineOptions, export_timeline, part_paths
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta

from . import kineto_tables, timeline_checks
from .conftest import RESNET_TRACE, assert_one_line_error, q

EPOCH = 1_800_000_000_000_000_000


@pytest.fixture(scope="module")
def resnet_timeline(resnet_profile, tmp_path_factory):
    out = tmp_path_factory.mktemp("tl") / "resnet.json.gz"
    res = export_timeline(ProfileData.open(resnet_profile), out)
    doc, events, size = timeline_checks.read(out)
    return res, doc, events


def test_resnet_timeline_has_every_layer_with_the_traces_counts(resnet_timeline):
    res, doc, events = resnet_timeline
    found = timeline_checks.check_structure(events)
    want = kineto_tables.count(RESNET_TRACE)
    got = timeline_checks.counts(events)
    assert got[("X", "cpu_op")] == want.by_cat["cpu_op"] == 7602
    assert got[("X", "cuda_runtime")] == want.by_cat["cuda_runtime"]
    assert got[("X", "cuda_driver")] == want.by_cat["cuda_driver"]
    assert got[("X", "kernel")] == want.by_cat["kernel"] == 2223
    assert got[("X", "gpu_memcpy")] == want.by_cat["gpu_memcpy"] == 9
    assert got[("X", "gpu_memset")] == want.by_cat["gpu_memset"]
    assert got[("X", "user_annotation")] == want.by_cat["user_annotation"]  # 15 phases + 3 steps
    # one arrow per GPU event whose launching call is in the trace
    assert found["flows"] == res.flows == want.launched == 2394
    assert sorted(found["processes"].values()) == ["rank 0 GPU 0 (NVIDIA H100 80GB HBM3)", "rank 0 host"]
    tracks = found["slices_by_track"]
    assert tracks["steps"] == 3
    assert tracks["phases (thread 452)"] == 15
    assert tracks["ops (thread 452)"] + tracks["ops (thread 492)"] == 7602
    assert tracks["CUDA API (thread 452)"] + tracks["CUDA API (thread 492)"] == 5101 + 123
    gpu = sum(n for name, n in tracks.items() if name.startswith("stream 7"))
    assert gpu == 2223 + 9 + 162
    # the PDL overlaps of this trace: kernels that start before the previous one ends
    assert tracks["stream 7 overlap 1"] == res.overlap_moved > 0


def test_kernel_times_are_exact(resnet_timeline):
    _, doc, events = resnet_timeline
    want = kineto_tables.count(RESNET_TRACE)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert sum(round(e["dur"] * 1000) for e in kernels) == want.kernel_ns
    assert Counter(e["name"] for e in kernels) == want.kernel_names
    # absolute times survive: base + ts is the trace's own time in ns
    trace_events, trace_meta = kineto_tables.load_events(RESNET_TRACE)
    first = min(kineto_tables.ns(e["ts"]) for e in trace_events if e.get("cat") == "kernel")
    base = doc["baseTimeNanoseconds"]
    assert base + min(round(e["ts"] * 1000) for e in kernels) == int(trace_meta["baseTimeNanoseconds"]) + first


def test_exported_timeline_reads_back_with_the_same_kernel_totals(resnet_profile, tmp_path):
    """Read the export as a Kineto trace (plain Python) into a new profile: same kernels."""
    out = tmp_path / "t.json"
    export_timeline(ProfileData.open(resnet_profile), out)
    tables, meta = kineto_tables.tables(out)
    b = ProfileBuilder()
    b.add_all(tables)
    again = b.write(tmp_path / "again.dlscope", meta)
    assert ProfileData.open(again).count("kernels") == 2223
    sql = "SELECT name, count(*), sum(end_ns - start_ns)::BIGINT, min(start_ns) FROM kernels GROUP BY 1 ORDER BY 1"
    assert q(ProfileData.open(tmp_path / "again.dlscope").con, sql) == q(ProfileData.open(resnet_profile).con, sql)


def test_import_back_with_dlscope_import(resnet_profile, tmp_path):
    """``dlscope import`` of an exported timeline gives the profile's kernel totals."""
    from dlscope.importers import IMPORTERS

    if not any(i.name == "kineto" for i in IMPORTERS):
        pytest.skip("waits for the Kineto importer (dlscope import of Chrome-trace JSON) on main")
    from dlscope.importers.run import import_files

    out = tmp_path / "t.json.gz"
    export_timeline(ProfileData.open(resnet_profile), out)
    import_files([out], tmp_path / "again.dlscope")
    sql = """SELECT name, device, stream, count(*), sum(end_ns - start_ns)::BIGINT FROM kernels
             GROUP BY ALL ORDER BY ALL"""
    assert q(ProfileData.open(tmp_path / "again.dlscope").con, sql) == q(ProfileData.open(resnet_profile).con, sql)
    steps = "SELECT step, start_ns, end_ns FROM steps ORDER BY 1"
    assert q(ProfileData.open(tmp_path / "again.dlscope").con, steps) == q(ProfileData.open(resnet_profile).con, steps)


def test_steps_window_keeps_only_those_steps(resnet_profile, tmp_path):
    out = tmp_path / "s.json"
    data = ProfileData.open(resnet_profile)
    export_timeline(data, out, TimelineOptions(window=StepWindow(3, 3)))
    _, events, _ = timeline_checks.read(out)
    timeline_checks.check_structure(events)
    non_meta = [e for e in events if e["ph"] in ("X", "i", "C")]
    assert non_meta and all(e["args"]["step"] == 3 for e in non_meta)
    (kernels_in_3,) = q(data.con, "SELECT count(*) FROM kernels WHERE step = 3")[0]
    assert sum(e.get("cat") == "kernel" for e in events) == kernels_in_3 > 0
    assert [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("Profiler")] == [
        "ProfilerStep#3"
    ]


def test_max_events_keeps_the_beginning(resnet_profile, tmp_path):
    out = tmp_path / "m.json"
    res = export_timeline(ProfileData.open(resnet_profile), out, TimelineOptions(max_events=5000))
    _, events, _ = timeline_checks.read(out)
    timeline_checks.check_structure(events)
    n = sum(e["ph"] != "M" for e in events)
    assert n == res.events <= 5000 and n > 4900
    assert res.total_events > 20000 and res.cut_at_s is not None
    assert any("kept the first" in note for note in res.notes)


def test_parts_stay_under_limits_and_add_up_to_the_whole(resnet_profile, tmp_path):
    data = ProfileData.open(resnet_profile)
    whole = tmp_path / "whole.json"
    export_timeline(data, whole)
    _, all_events, _ = timeline_checks.read(whole)
    out = tmp_path / "p.json.gz"
    res = export_timeline(data, out, TimelineOptions(part_events=4000, part_bytes=600_000))
    assert len(res.files) > 4 and res.files == part_paths(out, len(res.files))
    assert not out.exists()
    seen: Counter = Counter()
    for i, f in enumerate(res.files):
        doc, events, size = timeline_checks.read(f)
        assert len(events) <= 4000 and size <= 600_000
        assert doc["dlscope"]["part"] == i + 1 and doc["dlscope"]["parts"] == len(res.files)
        timeline_checks.check_structure(events)  # each part opens alone: named tracks, paired flows
        seen.update(json.dumps(e, sort_keys=True) for e in events if e["ph"] != "M")
    assert seen == Counter(json.dumps(e, sort_keys=True) for e in all_events if e["ph"] != "M")


def _profile(tmp_path: Path, **tables: pa.Table) -> ProfileData:
    b = ProfileBuilder()
    for name, t in tables.items():
        b.add(name, t)
    b.write(tmp_path / "p.dlscope", Meta(source="test", devices=[{"rank": 0, "index": 0, "name": "GPU X"}]))
    return ProfileData.open(tmp_path / "p.dlscope")


def test_names_that_need_escaping_stay_valid_json(tmp_path):
    names = ["</script><script>alert(1)</script>", 'say "hi"\\', "tab\tnew\nline", "ünïcødé ✓", "\x01ctl"]
    n = len(names)
    data = _profile(
        tmp_path,
        kernels=pa.table(
            {
                "rank": [0] * n,
                "device": [0] * n,
                "stream": [7] * n,
                "start_ns": [EPOCH + 1000 * i for i in range(n)],
                "end_ns": [EPOCH + 1000 * i + 500 for i in range(n)],
                "name": names,
            }
        ),
        ops=pa.table(
            {
                "rank": [0],
                "pid": [1],
                "tid": [1],
                "start_ns": [EPOCH],
                "end_ns": [EPOCH + 10],
                "name": ["op"],
                "op_id": [0],
                "input_shapes": ["not json ["],
            }
        ),
    )
    out = tmp_path / "t.json"
    export_timeline(data, out)
    _, events, _ = timeline_checks.read(out)
    timeline_checks.check_structure(events)
    assert [e["name"] for e in events if e.get("cat") == "kernel"] == names
    assert [e["args"]["Input Dims"] for e in events if e.get("cat") == "cpu_op"] == ["not json ["]


def test_overlapping_kernels_go_to_an_overlap_track_and_ranks_get_processes(tmp_path):
    # stream 7 of each rank: A [0, 100], B [90, 150] crosses A, C [95, 120] nests in B
    starts, ends = [0, 90, 95, 200], [100, 150, 120, 210]
    rows = {"rank": [], "device": [], "stream": [], "start_ns": [], "end_ns": [], "name": []}
    for rank in (0, 1):
        for i, (s, e) in enumerate(zip(starts, ends)):
            rows["rank"].append(rank)
            rows["device"].append(0)
            rows["stream"].append(7)
            rows["start_ns"].append(EPOCH + s * 1000)
            rows["end_ns"].append(EPOCH + e * 1000)
            rows["name"].append("ABCD"[i])
    counters = pa.table(
        {
            "rank": [0, 0],
            "device": [0, 0],
            "ts_ns": [EPOCH, EPOCH + 100_000],
            "metric": ["gpu_util", "gpu_util"],
            "value": [12.5, 80.0],
        }
    )
    data = _profile(tmp_path, kernels=pa.table(rows), counters=counters)
    out = tmp_path / "t.json"
    res = export_timeline(data, out)
    _, events, _ = timeline_checks.read(out)
    found = timeline_checks.check_structure(events)
    assert sorted(found["processes"].values()) == ["rank 0 GPU 0 (GPU X)", "rank 1 GPU 0"]
    assert res.overlap_moved == 4  # B and C on each rank
    by_track: dict[tuple, list] = {}
    for e in events:
        if e["ph"] == "X":
            by_track.setdefault((found["processes"][e["pid"]], found["threads"][(e["pid"], e["tid"])]), []).append(
                e["name"]
            )
    assert by_track[("rank 0 GPU 0 (GPU X)", "stream 7")] == ["A", "D"]
    assert by_track[("rank 0 GPU 0 (GPU X)", "stream 7 overlap 1")] == ["B", "C"]
    util = [e for e in events if e["ph"] == "C"]
    assert [(e["name"], e["args"]) for e in util] == [("gpu_util", {"%": 12.5}), ("gpu_util", {"%": 80.0})]
    assert found["processes"][util[0]["pid"]] == "rank 0 GPU 0 (GPU X)"


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["--steps", "7:9"], "selects no step"),
        (["--steps", "x"], "--steps"),
        (["-o", "t.txt"], ".json or .json.gz"),
        (["--max-events", "0"], "positive"),
        (["-t", "csv", "--max-events", "5"], "perfetto timeline only"),
    ],
)
def test_bad_export_arguments(cli, resnet_profile, tmp_path, argv, expect):
    argv = [a if a != "t.txt" else str(tmp_path / a) for a in argv]
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / ("out" if "csv" in argv else "out.json"))]
    r = cli("export", resnet_profile, *argv)
    assert r.code == 2, r
    assert_one_line_error(r.err)
    assert expect in r.err


def test_export_refuses_to_overwrite_and_a_missing_profile(cli, resnet_profile, tmp_path):
    out = tmp_path / "t.json"
    out.write_text("keep me")
    r = cli("export", resnet_profile, "-o", out)
    assert r.code == 2 and "exists" in r.err and out.read_text() == "keep me"
    assert_one_line_error(r.err)
    r = cli("export", tmp_path / "nope.dlscope", "-o", tmp_path / "n.json")
    assert r.code == 2
    assert_one_line_error(r.err)


def test_export_command_writes_timeline_and_tables(cli, resnet_profile, tmp_path):
    r = cli("export", resnet_profile, "-o", tmp_path / "t.json.gz")
    _, events, _ = timeline_checks.read(tmp_path / "t.json.gz")
    n = sum(e["ph"] != "M" for e in events)
    assert r.code == 0 and "timeline written to" in r.err and f"({n:,} events" in r.err and n > 20_000
    assert r.out == ""  # stdout stays clean; progress is silent when not on a terminal
    r = cli("export", resnet_profile, "-o", tmp_path / "p.json.gz", "--part-events", "5000")
    assert r.code == 0 and "split into 5 parts" in r.err
    assert all((tmp_path / f"p.part{i}.json.gz").exists() for i in range(1, 6))
    r = cli("export", resnet_profile, "-t", "csv", "-o", tmp_path / "csv", "--steps", "2:2")
    assert r.code == 0
    import csv

    with open(tmp_path / "csv" / "kernels.csv") as f:
        rows = list(csv.DictReader(f))
    (n,) = q(ProfileData.open(resnet_profile).con, "SELECT count(*) FROM kernels WHERE step = 2")[0]
    assert len(rows) == n and {r["step"] for r in rows} == {"2"} and rows[0]["name"].startswith("void ")
    r = cli("export", resnet_profile, "-t", "parquet", "-o", tmp_path / "pq")
    assert r.code == 0
    import pyarrow.parquet as pq

    assert pq.read_table(tmp_path / "pq" / "ops.parquet").num_rows == 7602


@pytest.mark.slow
def test_the_504k_event_trace_comes_out_in_parts_under_the_limits(tmp_path):
    from .conftest import SCALE_TRACE, need_file

    profile = kineto_tables.build_profile(need_file(SCALE_TRACE), tmp_path / "gpt12.dlscope")
    data = ProfileData.open(profile)
    want = kineto_tables.count(SCALE_TRACE)
    # the default limits (1M events, 256 MB)
    res = export_timeline(data, tmp_path / "all.json.gz")
    total = 0
    for f in res.files:
        _, events, size = timeline_checks.read(f)
        assert len(events) <= 1_000_000 and size <= 256_000_000
        total += sum(e.get("cat") == "kernel" for e in events)
    assert total == want.by_cat["kernel"] == 33920
    # forced into parts: each under its limits, opening alone, together the whole
    res = export_timeline(data, tmp_path / "p.json.gz", TimelineOptions(part_events=150_000, part_bytes=40_000_000))
    assert len(res.files) >= 3
    kernels, flows = 0, 0
    for f in res.files:
        _, events, size = timeline_checks.read(f)
        assert len(events) <= 150_000 and size <= 40_000_000
        flows += timeline_checks.check_structure(events)["flows"]
        kernels += sum(e.get("cat") == "kernel" for e in events)
    assert kernels == 33920 and flows == res.flows == want.launched


def test_every_table_becomes_well_formed_events(tmp_path):
    """Marks, syncs, copies, sets, host and GPU counters, shapes: each in its place, valid JSON."""
    t = EPOCH
    data = _profile(
        tmp_path,
        steps=pa.table(
            {
                "rank": [0],
                "step": [5],
                "start_ns": [t],
                "end_ns": [t + 10_000],
                "pid": [1],
                "tid": [1],
                "source": ["dlscope"],
                "warmup": [True],
            }
        ),
        phases=pa.table(
            {
                "rank": [0, 0],
                "pid": [1, 1],
                "tid": [1, 1],
                "start_ns": [t, t + 500],
                "end_ns": [t + 9_000, t + 500],
                "name": ["run", "checkpoint"],
                "kind": ["range", "mark"],
                "source": ["dlscope", "dlscope"],
            }
        ),
        ops=pa.table(
            {
                "rank": [0],
                "pid": [1],
                "tid": [1],
                "start_ns": [t + 100],
                "end_ns": [t + 2_000],
                "name": ["aten::mm"],
                "op_id": [0],
                "external_id": [7],
                "input_shapes": ["[[64, 32], [32, 8]]"],
                "input_types": ['["float", "float"]'],
                "input_values": ['["", ""]'],
            }
        ),
        api=pa.table(
            {
                "rank": [0, 0],
                "pid": [1, 1],
                "tid": [1, 1],
                "start_ns": [t + 200, t + 300],
                "end_ns": [t + 250, t + 350],
                "name": ["cudaMemcpyAsync", "cudaMemsetAsync"],
                "correlation_id": [11, 12],
                "kind": ["runtime", "runtime"],
            }
        ),
        memcpy=pa.table(
            {
                "rank": [0],
                "device": [0],
                "stream": [3],
                "start_ns": [t + 400],
                "end_ns": [t + 900],
                "correlation_id": [11],
                "bytes": [4096],
                "copy_kind": ["HtoD"],
                "src_kind": ["pinned"],
                "dst_kind": ["device"],
            }
        ),
        memset=pa.table(
            {
                "rank": [0],
                "device": [0],
                "stream": [3],
                "start_ns": [t + 950],
                "end_ns": [t + 990],
                "correlation_id": [12],
                "bytes": [64],
                "mem_kind": ["device"],
            }
        ),
        sync=pa.table(
            {
                "rank": [0],
                "pid": [1],
                "tid": [1],
                "device": [0],
                "stream": [3],
                "start_ns": [t + 1000],
                "end_ns": [t + 1500],
                "kind": ["stream"],
            }
        ),
        counters=pa.table(
            {
                "rank": [0, 0, 0],
                "device": [0, -1, 0],
                "ts_ns": [t, t, t + 5],
                "metric": ["power", "torch_allocated", "sm_clock"],
                "value": [250.0, 1e9, float("nan")],
            }
        ),
    )
    out = tmp_path / "t.json"
    res = export_timeline(data, out)
    _, events, _ = timeline_checks.read(out)
    found = timeline_checks.check_structure(events)
    by = {(e["ph"], e.get("cat"), e["name"]): e for e in events if e["ph"] != "M"}
    assert by[("X", "user_annotation", "ProfilerStep#5")]["args"] == {"step": 5, "warmup": True, "source": "dlscope"}
    mark = by[("i", "user_annotation", "checkpoint")]
    assert found["threads"][(mark["pid"], mark["tid"])] == "phases (thread 1)"
    mm = by[("X", "cpu_op", "aten::mm")]
    assert mm["args"]["Input Dims"] == [[64, 32], [32, 8]] and mm["args"]["Input type"] == ["float", "float"]
    assert mm["args"]["Concrete Inputs"] == ["", ""]
    copy = by[("X", "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)")]
    assert copy["args"]["bytes"] == 4096 and found["threads"][(copy["pid"], copy["tid"])] == "stream 3"
    assert by[("X", "gpu_memset", "Memset (Device)")]["args"]["bytes"] == 64
    assert by[("X", "cuda_sync", "Stream Sync")]["args"]["cuda_sync_kind"] == "Stream Sync"
    assert res.flows == found["flows"] == 2
    counters = [(found["processes"][e["pid"]], e["name"], e["args"]) for e in events if e["ph"] == "C"]
    assert sorted(counters) == [
        ("rank 0 GPU 0 (GPU X)", "power", {"W": 250.0}),
        ("rank 0 host", "torch_allocated", {"value": 1e9}),
    ]  # NaN left out
    # times are relative to a whole second, so that microseconds keep their nanoseconds in a double
    doc, _, _ = timeline_checks.read(out)
    base = doc["baseTimeNanoseconds"]
    assert base % 1_000_000_000 == 0 and base + round(mm["ts"] * 1000) == t + 100


def test_tiny_max_events_and_an_empty_profile_still_give_valid_files(resnet_profile, tmp_path):
    res = export_timeline(ProfileData.open(resnet_profile), tmp_path / "one.json", TimelineOptions(max_events=1))
    _, events, _ = timeline_checks.read(tmp_path / "one.json")
    timeline_checks.check_structure(events)
    assert sum(e["ph"] != "M" for e in events) == res.events <= 1
    ProfileBuilder().write(tmp_path / "empty.dlscope", Meta(source="test"))
    res = export_timeline(ProfileData.open(tmp_path / "empty.dlscope"), tmp_path / "empty.json.gz")
    doc, events, _ = timeline_checks.read(tmp_path / "empty.json.gz")
    assert events == [] and res.events == 0 and len(res.files) == 1
