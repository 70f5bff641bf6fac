"""Bad input never crashes: malformed records an importer lets through, and a short mutation fuzz.

The fuzz (mutations and the property in tests/fuzz_inputs.py) is derandomized and small, so that
CI runs the same few inputs every time; bench/fuzz.py runs it for minutes and records its counts
in bench/RESULTS.md. Every crash it found has its own regression test here.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlscope.store.build import ProfileBuilder

from . import fuzz_inputs
from .conftest import CORPUS, DATA, assert_one_line_error

SIMPLE_ADD = CORPUS / "critical_path" / "simple_add" / "benchmark_result_493459_1694039959_trace.json.gz"


def _runner(cli):
    def run(args: list[str]) -> tuple[int, str, str]:
        r = cli(*args)
        return r.code, r.out, r.err

    return run


def _x_events_without_ts(src: Path, dst: Path) -> tuple[int, int]:
    """Write ``src`` with every third "X" event's ``ts`` removed; returns (removed, X events)."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    for e in xs[::3]:
        del e["ts"]
    dst.write_text(json.dumps(doc))
    return len(xs[::3]), len(xs)


# ---- regressions ------------------------------------------------------------------------------


def test_kineto_events_without_ts_are_dropped_and_counted_and_every_command_runs(cli, tmp_path):
    """The known crash: a third of the "X" events without "ts" imported (NULL start times) and
    then broke summary, advise and report (TypeError in the rules and the tensor-core share)."""
    trace = tmp_path / "no_ts.json"
    removed, total = _x_events_without_ts(SIMPLE_ADD, trace)
    assert removed > 100
    prof = tmp_path / "p.dlscope"
    r = cli("import", trace, "-o", prof)
    assert r.code == 0, r.err
    notes = json.loads((prof / "meta.json").read_text())["notes"]
    assert f"no_ts.json: {removed} malformed event(s) not imported (no readable start time 'ts')" in notes
    # nothing without a start reached the tables, and the events with one all did
    r = cli(
        "sql",
        prof,
        "select (select count(*) from ops) + (select count(*) from api) + "
        "(select count(*) from kernels) + (select count(*) from phases) as n, "
        "(select count(*) from kernels where start_ns is null) as null_starts",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["null_starts"] == 0
    kept = json.loads(gzip.decompress(SIMPLE_ADD.read_bytes()))["traceEvents"]
    kept_x = [e for e in kept if e.get("ph") == "X"]
    del kept_x[::3]
    imported_cats = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel"}
    assert row["n"] == sum(
        1
        for e in kept_x
        if e.get("cat", "").lower() in imported_cats and not e.get("name", "").startswith("ProfilerStep#")
    )
    (tmp_path / "w").mkdir()
    ran, problems = fuzz_inputs.check_input(trace, tmp_path / "w", _runner(cli))
    assert ran and problems == []
    assert (tmp_path / "w" / "x.html").stat().st_size > 10_000


def test_builder_drops_rows_the_schema_forbids_and_notes_them(tmp_path):
    """Whatever importer lets a NULL time, a time outside [0, 2**62) or an end before its start
    through, the builder keeps it out of the profile and says so in the notes."""
    from dlscope.store.meta import Meta

    b = ProfileBuilder()
    b.add(
        "kernels",
        pa.table(
            {
                "rank": [0] * 6,
                "start_ns": [10, None, 30, 40, -5, 60],
                "end_ns": [20, 25, 29, 50, 7, 2**62],
                "name": ["a", "b", "c", "d", "e", "f"],
            }
        ),
    )
    b.add("ops", pa.table({"rank": [0, 0], "start_ns": [1, 2], "end_ns": [5, 3], "name": ["x", None], "op_id": [0, 1]}))
    meta = Meta()
    out = b.write(tmp_path / "p.dlscope", meta, durable=False)
    b.close()
    assert pq.read_table(out / "kernels.parquet").column("start_ns").to_pylist() == [10, 40]
    assert pq.read_table(out / "ops.parquet").column("op_id").to_pylist() == [0]
    assert b.dropped == {"kernels": 4, "ops": 1}
    assert any(n.startswith("4 malformed row(s) of kernels not stored") for n in meta.notes)
    assert any(n.startswith("1 malformed row(s) of ops not stored") for n in meta.notes)


def test_a_profile_stored_with_null_times_still_opens_for_every_command(cli, tmp_path):
    """Profiles written before the builder refused NULL times: the reader leaves those rows out."""
    trace = tmp_path / "t.json"
    trace.write_bytes(gzip.decompress(SIMPLE_ADD.read_bytes()))
    prof = tmp_path / "p.dlscope"
    assert cli("import", trace, "-o", prof).code == 0
    n_kernels = json.loads(cli("sql", prof, "select count(*) as n from kernels", "--format", "json").out)[0]["n"]
    # what the old import wrote: a NULL start in every third kernel and op
    for table in ("kernels", "ops"):
        f = prof / f"{table}.parquet"
        t = pq.read_table(f)
        i = t.schema.get_field_index("start_ns")
        starts = [None if k % 3 == 0 else v for k, v in enumerate(t.column(i).to_pylist())]
        field = t.schema.field(i).with_nullable(True)
        t = t.cast(t.schema.set(i, field)).set_column(i, field, pa.array(starts, pa.int64()))
        pq.write_table(t, f)
    got = json.loads(cli("sql", prof, "select count(*) as n from kernels", "--format", "json").out)[0]["n"]
    assert got == n_kernels - len(range(0, n_kernels, 3))
    work = tmp_path / "w"
    work.mkdir()
    for args in fuzz_inputs.commands(prof, work):
        r = cli(*args)
        assert r.code == 0, (args[0], r.err)


def test_report_tables_show_a_dash_for_null_numbers():
    from dlscope.render.html import details

    top = pa.table(
        {
            "name": ["k<script>"],
            "count": pa.array([None], pa.int64()),
            "total_ns": [None],
            "mean_ns": pa.array([None], pa.float64()),
            "pct": pa.array([None], pa.float64()),
        }
    )
    html = details.kernels_section(top, None)
    assert "k&lt;script&gt;" in html and "<script>" not in html
    assert html.count('<td class="num">-</td>') == 4
    ops = pa.table(
        {
            "name": ["op"],
            "count": pa.array([None], pa.int64()),
            "self_ns": [None],
            "total_ns": [5_000_000],
            "pct": pa.array([None], pa.float64()),
        }
    )
    assert details.ops_section(ops).count('<td class="num">-</td>') == 3


def test_a_hostile_name_is_escaped_in_the_report_and_stays_json_in_the_timeline(cli, tmp_path):
    doc = json.loads(gzip.decompress(SIMPLE_ADD.read_bytes()))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    for e in kernels:
        e["name"] = '</style><script>alert("x")</script>\x01'
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    work = tmp_path / "w"
    work.mkdir()
    ran, problems = fuzz_inputs.check_input(trace, work, _runner(cli))
    assert ran and problems == []
    html = (work / "x.html").read_text()
    assert "&lt;script&gt;alert(" in html and "<script" not in html.lower()
    timeline = json.loads(gzip.decompress((work / "x.json.gz").read_bytes()))
    names = {e.get("name") for e in timeline["traceEvents"]}
    assert '</style><script>alert("x")</script>\x01' in names


@pytest.mark.parametrize("start", [2**63 - 1, -(2**63)])
def test_nsys_times_past_int64_are_dropped_not_a_crash(cli, tmp_path, start):
    """Found by the fuzzer: a start near 2**63 plus the session's offset overflows in SQLite, which
    silently gives a float, and building the Arrow column failed (ArrowInvalid, exit 1); a start
    near -2**63 imported, and every command then overflowed int64 in end - start (exit 1)."""
    db = tmp_path / "x.sqlite"
    db.write_bytes(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    con = sqlite3.connect(db)
    n = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()[0][0]
    bad = con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ? WHERE rowid % 3 = 0", (start,)).rowcount
    con.commit()
    con.close()
    prof = tmp_path / "p.dlscope"
    r = cli("import", db, "-o", prof)
    assert r.code == 0, r.err
    assert f"{bad} malformed row(s) of kernels not stored" in " ".join(
        json.loads((prof / "meta.json").read_text())["notes"]
    )
    r = cli("sql", prof, "select count(*) as n from kernels", "--format", "json")
    assert json.loads(r.out)[0]["n"] == n - bad
    work = tmp_path / "w"
    work.mkdir()
    for args in fuzz_inputs.commands(prof, work):
        r = cli(*args)
        assert r.code == 0, (args[0], r.err)


def test_gpu_copies_without_kernels(cli, tmp_path):
    """Found by the fuzzer (an nsys export without its kernel table): with copies and sets but no
    kernel, the union of GPU work took its column names from the copies' unnamed expressions, and
    summary, advise and report failed (BinderException, exit 1). The same from a Kineto trace."""
    doc = json.loads(gzip.decompress(SIMPLE_ADD.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    copies = sum(1 for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy")
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    work = tmp_path / "w"
    work.mkdir()
    ran, problems = fuzz_inputs.check_input(trace, work, _runner(cli))
    assert ran and problems == []
    r = cli("stats", work / "p.dlscope", "--report", "cuda_gpu_trace", "--format", "json")
    assert r.code == 0, r.err
    names = [row["Name"] for row in json.loads(r.out)]
    assert sum(n.startswith("[CUDA memcpy") for n in names) == copies > 0


@pytest.mark.parametrize("what", ["truncated", "not_json", "events_not_a_list"])
def test_a_refused_trace_is_one_line_exit_2(cli, tmp_path, what):
    raw = gzip.decompress(SIMPLE_ADD.read_bytes())
    data = {
        "truncated": raw[: len(raw) // 2],
        "not_json": b'{"traceEvents": [{"ph": "X" "ts": 1}]}',
        "events_not_a_list": b'{"traceEvents": [1, "two", null]}',
    }[what]
    trace = tmp_path / "t.json"
    trace.write_bytes(data)
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


# ---- the fuzz -----------------------------------------------------------------------------------

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _fuzz_one(cli, rng: random.Random, kind: str) -> None:
    m = fuzz_inputs.mutant(rng, kind)
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-") as d:
        path = m.write(Path(d))
        work = Path(d) / "w"
        work.mkdir()
        _, problems = fuzz_inputs.check_input(path, work, _runner(cli))
    assert problems == [], f"{m.kind} input from {m.seed} ({m.how}): {problems}"


@settings(FUZZ, max_examples=16)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_kineto(cli, rng):
    _fuzz_one(cli, rng, "kineto")


@settings(FUZZ, max_examples=12)
@given(
    rng=st.randoms(use_true_random=False),
    kind=st.sampled_from(["execution_trace", "ncu", "nsys", "xplane", "memory_timeline", "trace_folder"]),
)
def test_fuzz_other_formats(cli, rng, kind):
    _fuzz_one(cli, rng, kind)


# ---- damaged profiles and XSpace files (issue 25) ------------------------------------------------

MLP_PROFILE = DATA / "advice_truth_hooks" / "mlp_baseline_default.dlscope"


def _damaged_copy(tmp_path: Path) -> Path:
    prof = tmp_path / "p.dlscope"
    shutil.copytree(MLP_PROFILE, prof)
    return prof


def _every_command_refuses(cli, prof: Path, tmp_path: Path, expect: str) -> None:
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    for args in fuzz_inputs.profile_commands(prof, work, MLP_PROFILE):
        r = cli(*args)
        assert r.code == 2, (args[0], r.code, r.err)
        assert_one_line_error(r.err)
        if args[0] != "merge":
            assert expect in r.err, (args[0], r.err)


def _flip_in_data_pages(f: Path) -> None:
    """Flip bytes inside the first column chunk's compressed pages, leaving the footer intact."""
    md = pq.read_metadata(f)
    col = md.row_group(0).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    b = bytearray(f.read_bytes())
    for k in range(start + 20, start + col.total_compressed_size - 1, 3):
        b[k] ^= 0x5A
    f.write_bytes(bytes(b))


def test_a_table_file_damaged_past_its_footer_is_one_line_for_every_command(cli, tmp_path):
    """Found by the fuzzer: open_profile checks the footer only, and DuckDB then failed on the
    pages (ZSTD decompression failure, TProtocolException) in summary, the report, the export's
    streaming read... (exit 1). Every command now names the file, exit 2."""
    prof = _damaged_copy(tmp_path)
    _flip_in_data_pages(prof / "ops.parquet")
    pq.read_metadata(prof / "ops.parquet")  # the footer still reads
    _every_command_refuses(cli, prof, tmp_path, "ops.parquet: corrupt or truncated table file")


@pytest.mark.parametrize(
    ("field", "value", "expect"),
    [
        ("inputs", [1, 2], "inputs is [1, 2], not list[str]"),
        ("dropped", "abc", 'dropped is "abc", not dict[int]'),
        ("collectors", {"nvml": {"status": ["ok"]}}, 'collectors.nvml.status is ["ok"], not str'),
        ("run_end", [1], "run_end is [1], not dict or null"),
        ("run_end", {"exit_code": "1"}, 'run_end.exit_code is "1", not int or null'),
        ("run_end", {"ranks": {"0": 1}}, 'run_end.ranks is {"0": 1}, not list[dict]'),
        ("run_end", {"ranks": [{"rank": "1", "pid": 7}]}, 'run_end.ranks[0].rank is "1", not int'),
        ("run_end", {"ranks": [{"rank": 1}]}, "run_end.ranks[0] has no rank or pid"),
    ],
)
def test_meta_json_with_a_field_of_the_wrong_type_is_refused(cli, tmp_path, field, value, expect):
    """Found by the fuzzer: meta.json's fields were taken as they came, and a list of numbers for
    ``inputs`` or a string for ``dropped`` broke the report halfway (TypeError, AttributeError)."""
    prof = _damaged_copy(tmp_path)
    meta = json.loads((prof / "meta.json").read_text())
    meta[field] = value
    (prof / "meta.json").write_text(json.dumps(meta))
    _every_command_refuses(cli, prof, tmp_path, f"corrupt meta.json ({expect}")


def test_a_device_entry_of_the_wrong_types_is_left_out_not_a_crash(cli, tmp_path):
    """Found by the fuzzer: a device whose index or memory was text (a damaged meta.json, a
    trace's deviceProperties) broke summary (int('...'), exit 1). Those keys are left out."""
    prof = _damaged_copy(tmp_path)
    meta = json.loads((prof / "meta.json").read_text())
    meta["devices"] = [
        {"rank": 0, "index": "back\\slash", "name": ["x"], "memory_bytes": "lots", "sms": None},
        "not a device",
    ]
    (prof / "meta.json").write_text(json.dumps(meta))
    work = tmp_path / "w"
    work.mkdir()
    for args in fuzz_inputs.commands(prof, work):
        if args[0] in ("summary", "report", "export"):  # those that show the devices
            r = cli(*args)
            assert r.code == 0, (args[0], r.err)
    from dlscope.store.meta import load_meta

    assert load_meta(prof / "meta.json").devices == [{"rank": 0, "sms": None}]


def test_a_table_file_of_the_wrong_column_type_is_refused(cli, tmp_path):
    """A Parquet file with the right column names but a text time: refused when the profile
    opens, naming the column (DuckDB failed in the analysis' arithmetic, exit 1). A narrower
    integer reads as the schema's type."""
    prof = _damaged_copy(tmp_path)
    f = prof / "kernels.parquet"
    t = pq.read_table(f)
    i = t.schema.get_field_index("end_ns")
    pq.write_table(t.set_column(i, pa.field("end_ns", pa.string()), t.column(i).cast(pa.string())), f)
    _every_command_refuses(cli, prof, tmp_path, "column end_ns of table kernels is string, not int64")
    # a narrower integer is not damage: the view casts it
    t = pq.read_table(MLP_PROFILE / "steps.parquet")
    i = t.schema.get_field_index("step")
    pq.write_table(t, prof / "steps.parquet")
    pq.write_table(pq.read_table(MLP_PROFILE / "kernels.parquet"), f)
    t = t.set_column(i, pa.field("step", pa.int16()), t.column(i).cast(pa.int16()))
    pq.write_table(t, prof / "steps.parquet")
    q = "select typeof(step) as t, sum(step)::BIGINT as s from steps group by 1"
    r = cli("sql", prof, q, "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"t": "INTEGER", "s": sum(t.column(i).to_pylist())}]
    assert cli("summary", prof).code == 0


def test_an_xplane_field_of_the_wrong_wire_type_is_one_line(cli, tmp_path):
    """Found by the fuzzer: a flipped byte turned a text field of an XSpace into a number, and the
    reader called .decode on an int (AttributeError, exit 1). A field of the wrong wire type is
    now corrupt input."""
    from dlscope.importers.xplane_pb import parse_xspace

    from . import xspace_writer as xw

    stat_as_number = xw._bytes(5, xw._int(1, 7) + xw._int(2, 3))  # stat metadata whose name (2) is a varint
    space = xw._bytes(1, xw._bytes(2, b"/host:CPU") + stat_as_number)
    with pytest.raises(ValueError, match="wrong wire type"):
        parse_xspace(space)
    trace = tmp_path / "vm.xplane.pb"
    trace.write_bytes(space)
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


@settings(FUZZ, max_examples=4)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_damaged_profiles(cli, rng):
    m = fuzz_inputs.mutant(rng, "profile")
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-") as d:
        work = Path(d) / "w"
        work.mkdir()
        _, problems = fuzz_inputs.check_input(m.write(Path(d)), work, _runner(cli))
    assert problems == [], f"profile {m.seed} ({m.how}): {problems}"


def test_a_profile_whose_kernels_table_is_empty_runs_every_command(cli, tmp_path):
    """Found by the fuzzer: runtime launches but no kernel (the kernels table emptied). The
    launch_bound rule divided a NULL median, and the replay's union of GPU work took its column
    names from the copies' part (BinderException in summary and advise --what-if, exit 1)."""
    prof = _damaged_copy(tmp_path)
    f = prof / "kernels.parquet"
    t = pq.read_table(f)
    pq.write_table(t.slice(0, 0), f)
    work = tmp_path / "w"
    work.mkdir()
    for args in fuzz_inputs.profile_commands(prof, work, MLP_PROFILE):
        r = cli(*args)
        assert r.code in (0, 2), (args[0], r.code, r.err)
        if r.code == 2:
            assert_one_line_error(r.err)
    r = cli("advise", prof, "--what-if")
    assert r.code == 0, r.err


# ---- found by the faster long run (issue 25, parallel jobs) ----------------------------------------

CPU_ONLY = CORPUS / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"


@pytest.mark.parametrize("value", ["", "abc", 5, {"a": 1}])
def test_a_gloo_annotation_whose_inputs_are_not_json_imports(cli, tmp_path, value):
    """Found by the fuzzer: a gloo annotation whose "Input Dims" was an empty string failed the
    import in DuckDB's json_extract (InvalidInputException, exit 1). The operation's size is
    then unknown; the operation is still a comms row."""
    doc = json.loads(gzip.decompress(CPU_ONLY.read_bytes()))
    gloo = [e for e in doc["traceEvents"] if str(e.get("name", "")).startswith("gloo:")]
    assert gloo
    for e in gloo:
        e["args"]["Input Dims"] = value
        e["args"]["Input type"] = value
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    work = tmp_path / "w"
    work.mkdir()
    ran, problems = fuzz_inputs.check_input(trace, work, _runner(cli))
    assert ran and problems == []
    r = cli(
        "sql",
        work / "p.dlscope",
        "select count(*) as n, count(in_bytes) as sized from comms where backend = 'gloo'",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"n": len(gloo), "sized": 0}]


def test_a_profile_whose_strings_table_lacks_the_names_runs_every_command(cli, tmp_path):
    """Found by the fuzzer: with the strings table emptied (valid Parquet, no rows) every name
    read as NULL, and summary, report and diff failed on them (TypeError, exit 1). A name whose
    id strings lacks now reads as ``<unknown string ID>``."""
    prof = _damaged_copy(tmp_path)
    f = prof / "strings.parquet"
    pq.write_table(pq.read_table(f).slice(0, 0), f)
    _profile_commands_pass(cli, prof, tmp_path)
    r = cli(
        "sql",
        prof,
        "select count(*) as n, count(*) filter (where name like '<unknown string %>') as unknown from kernels",
        "--format",
        "json",
    )
    row = json.loads(r.out)[0]
    assert row["n"] > 0 and row["unknown"] == row["n"]


@pytest.mark.parametrize("base", [1e300, 10**30, -(2**64)])
def test_a_base_time_no_int64_holds_is_one_line(cli, tmp_path, base):
    """Found by the fuzzer: ``baseTimeNanoseconds`` of 1e300 made every event's time a number
    past int64, and the import failed converting it (ConversionException, exit 1). Refused."""
    doc = json.loads(gzip.decompress(SIMPLE_ADD.read_bytes()))
    doc["baseTimeNanoseconds"] = base
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)
    assert "baseTimeNanoseconds" in r.err and "out of range" in r.err


# ---- found by the long run of seed 40 -------------------------------------------------------------


def _profile_commands_pass(cli, prof: Path, tmp_path: Path) -> None:
    """Every command of the property over ``prof`` exits 0 (merge: 2, both profiles hold rank 0)."""
    work = tmp_path / "w"
    work.mkdir(exist_ok=True)
    for args in fuzz_inputs.profile_commands(prof, work, MLP_PROFILE):
        r = cli(*args)
        if args[0] == "merge":
            assert r.code == 2 and "rank 0 is in both" in r.err, r.err
        else:
            assert r.code == 0, (args[0], r.code, r.err)


def test_a_device_whose_index_is_null_is_left_out_not_a_crash(cli, tmp_path):
    """Found by the fuzzer (crash 1100, meta_shape): a device with ``"index": null`` in meta.json
    (a trace's deviceProperties without "id" writes the same) broke summary and report in the GPU
    headline (int(None), exit 1). A null index is left out, as if the source had not said it."""
    prof = _damaged_copy(tmp_path)
    meta = json.loads((prof / "meta.json").read_text())
    assert meta["devices"][0]["index"] == 0
    meta["devices"][0]["index"] = None
    (prof / "meta.json").write_text(json.dumps(meta))
    from dlscope.store.meta import load_meta

    dev = load_meta(prof / "meta.json").devices[0]
    assert "index" not in dev and dev["name"] == meta["devices"][0]["name"]
    _profile_commands_pass(cli, prof, tmp_path)


def _narrowed(f: Path, column: str) -> pa.Table:
    """Rewrite ``f`` with ``column`` cast to int8 as fuzz_inputs' wrong_parquet does (wrapping),
    returning the table before."""
    import pyarrow.compute as pc

    t = pq.read_table(f)
    i = t.schema.get_field_index(column)
    pq.write_table(t.set_column(i, pa.field(column, pa.int8()), pc.cast(t.column(i), pa.int8(), safe=False)), f)
    return t


def test_step_starts_stored_as_int8_are_malformed_rows_not_a_regression(cli, tmp_path):
    """Found by the fuzzer (crash 2083, wrong_parquet): steps.parquet's start_ns narrowed to int8
    read as times in 1970 (-128..127 ns), and check saw 57-year steps: a regression, exit 1 with
    nothing on stderr (check's verdict, not an error). The reader now leaves out the rows whose
    times the builder would not have stored (before the epoch, longer than 2**52 ns): no steps."""
    prof = _damaged_copy(tmp_path)
    _narrowed(prof / "steps.parquet", "start_ns")
    r = cli("sql", prof, "select count(*) as n from steps", "--format", "json")
    assert r.code == 0 and json.loads(r.out) == [{"n": 0}], r.err
    r = cli("check", prof, "--baseline", MLP_PROFILE, "--max-regression", "999999%")
    assert r.code == 0 and "this profile has no steps" in r.out, (r.code, r.out, r.err)
    _profile_commands_pass(cli, prof, tmp_path)


def test_op_ends_stored_as_int8_do_not_overflow_the_sums(cli, tmp_path):
    """Found by the fuzzer (crash 3021, wrong_parquet): ops.parquet's end_ns narrowed to int8
    gave every op an end 57 years before its start, and sum(end_ns - start_ns)::BIGINT overflowed
    in stats and report (ConversionException, exit 1). Those rows are malformed: not read."""
    prof = _damaged_copy(tmp_path)
    _narrowed(prof / "ops.parquet", "end_ns")
    r = cli("sql", prof, "select count(*) as n from ops", "--format", "json")
    assert r.code == 0 and json.loads(r.out) == [{"n": 0}], r.err
    _profile_commands_pass(cli, prof, tmp_path)


def test_the_reader_leaves_out_rows_of_absurd_times_and_keeps_the_rest(cli, tmp_path):
    """The reader's rule is the builder's (schema.TIME_RULE): in int64, a few ops made to start at
    0 (so lasting ~57 years), to end before they start, or to end past 2**62 are left out; every
    other row reads as stored, and the sums of durations that overflowed no longer do."""
    prof = _damaged_copy(tmp_path)
    f = prof / "ops.parquet"
    t = pq.read_table(f)
    starts, ends = t.column("start_ns").to_pylist(), t.column("end_ns").to_pylist()
    bad = {5: (0, ends[5]), 6: (starts[6], 0), 7: (starts[7], 2**63 - 1), 8: (-(2**63), ends[8])}
    for k, (s, e) in bad.items():
        starts[k], ends[k] = s, e
    for col, vals in (("start_ns", starts), ("end_ns", ends)):
        i = t.schema.get_field_index(col)
        t = t.set_column(i, t.schema.field(i), pa.array(vals, pa.int64()))
    pq.write_table(t, f)
    q = "select count(*) as n, sum(end_ns - start_ns)::BIGINT as d from ops"
    want = json.loads(cli("sql", MLP_PROFILE, q, "--format", "json").out)[0]
    kept = [e - s for k, (s, e) in enumerate(zip(t.column("start_ns").to_pylist(), ends)) if k not in bad]
    r = cli("sql", prof, q, "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out) == [{"n": want["n"] - len(bad), "d": sum(kept)}]
    for args in (["stats", prof, "--report", "all", "--format", "json"], ["summary", prof]):
        r = cli(*args)
        assert r.code == 0, (args[0], r.err)


def test_builder_drops_rows_longer_than_2_pow_52_ns(tmp_path):
    from dlscope.store.meta import Meta
    from dlscope.store.schema import MAX_DURATION_NS

    b = ProfileBuilder()
    b.add(
        "kernels",
        pa.table(
            {
                "rank": [0] * 3,
                "start_ns": [10, 10, 2**62 - 2],
                "end_ns": [10 + MAX_DURATION_NS, 11 + MAX_DURATION_NS, 2**62 - 1],
                "name": ["a", "b", "c"],
            }
        ),
    )
    out = b.write(tmp_path / "p.dlscope", Meta(), durable=False)
    b.close()
    assert pq.read_table(out / "kernels.parquet").column("name_id").length() == 2
    assert b.dropped == {"kernels": 1}


# ---- found by the long run of seed 44 -------------------------------------------------------------


def _cut_in_data_pages(f: Path, column: str) -> None:
    """Delete a few bytes inside ``column``'s pages (the footer, at the end, still reads, its
    offsets now off): as fuzz_inputs' byte deletion did to memset.parquet."""
    md = pq.read_metadata(f)
    col = next(
        md.row_group(0).column(j) for j in range(md.num_columns) if md.row_group(0).column(j).path_in_schema == column
    )
    start = col.dictionary_page_offset or col.data_page_offset
    b = f.read_bytes()
    f.write_bytes(b[: start + 1] + b[start + 22 :])


def test_a_damaged_page_read_through_the_timeline_stream_is_one_line(cli, tmp_path, monkeypatch):
    """Found by the fuzzer (crash 3922, parquet_bytes on memset.parquet): the export's streaming
    read got DuckDB's error through the Arrow stream as a plain OSError ("Invalid Error:
    TProtocolException: Invalid data", no errno), which _damaged_tables_refused did not catch
    (exit 1), and when DuckDB's own error came instead, the file was looked for on the export's
    connection, still holding the failed stream: strings.parquet was named. Which of the two
    errors comes depends on DuckDB's threads, so the OSError is also raised deterministically."""
    prof = _damaged_copy(tmp_path)
    _cut_in_data_pages(prof / "memset.parquet", "bytes")
    out = tmp_path / "x.json.gz"
    for _ in range(3):
        r = cli("export", prof, "-o", out, "-f")
        assert r.code == 2, r.err
        assert_one_line_error(r.err)
        assert "memset.parquet: corrupt or truncated table file" in r.err, r.err
        assert not out.exists() and not out.with_name(out.name + ".tmp").exists()

    import dlscope.render.timeline as timeline

    def stream_fails(data, path, options=None):
        raise OSError("Invalid Error: TProtocolException: Invalid data")

    monkeypatch.setattr(timeline, "export_timeline", stream_fails)
    r = cli("export", prof, "-o", out, "-f")
    assert r.code == 2, r.err
    assert_one_line_error(r.err)
    assert "memset.parquet: corrupt or truncated table file (TProtocolException: Invalid data)" in r.err

    def disk_full(data, path, options=None):  # a failed write of the output is no damaged table
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(timeline, "export_timeline", disk_full)
    r = cli("export", prof, "-o", out, "-f")
    assert r.code == 1 and "corrupt" not in r.err and "No space left on device" in r.err, r.err


def test_a_footer_whose_column_path_is_not_utf8_is_refused(cli, tmp_path):
    """Found by the fuzzer (crash 5247, parquet_bytes on steps.parquet): a flipped byte in the
    footer made a column chunk's path invalid UTF-8; the schema's names still read, but the
    statistics check of the times decoded the path (path_in_schema) and raised
    UnicodeDecodeError in summary and stats (exit 1). The file is now refused as corrupt (by
    DuckDB's reading of the footer's statistics, since pyarrow's could abort)."""
    prof = _damaged_copy(tmp_path)
    f = prof / "steps.parquet"
    b = bytearray(f.read_bytes())
    footer_len = int.from_bytes(b[-8:-4], "little")
    footer = len(b) - 8 - footer_len
    # the schema names each column first, the column chunks repeat its path after: the second
    # "start_ns" of the footer is the path (same length, so the footer's structure holds)
    first = b.index(b"start_ns", footer)
    second = b.index(b"start_ns", first + 1)
    b[second + 7] = 0xF3
    f.write_bytes(bytes(b))
    assert "start_ns" in pq.read_metadata(f).schema.names  # the footer reads, its names too
    _every_command_refuses(
        cli, prof, tmp_path, "steps.parquet: corrupt or truncated table file (Invalid Input Error: Invalid unicode"
    )


def _retype_chunk_in_footer(f: Path, column: str) -> None:
    """Give ``column``'s chunk in the first row group the physical type BOOLEAN in the footer
    (the schema still says INT64; the data pages are untouched). In the compact Thrift of the
    footer the chunk's ColumnMetaData starts with field 1, ``type``, an i32 (header 0x15), INT64
    being zigzag 4, just before the chunk's path."""
    b = bytearray(f.read_bytes())
    footer = len(b) - 8 - int.from_bytes(b[-8:-4], "little")
    first = b.index(column.encode(), footer)  # the schema's name; the chunk's path comes after
    at = b.rindex(b"\x15\x04", footer, b.index(column.encode(), first + 1))
    b[at + 1] = 0x00  # BOOLEAN
    f.write_bytes(bytes(b))


def test_a_chunk_whose_footer_type_differs_from_the_schema_does_not_abort(cli, tmp_path):
    """Found by the fuzzer (seed 102, inputs 25110 and 31494 on the 4-GPU host): a column chunk
    whose physical type in the footer (UNKNOWN, BOOLEAN) was not the schema's INT64. Reading its
    statistics through pyarrow's footer objects threw a C++ exception Python cannot catch and
    every command aborted (SIGABRT, no line of its own). The footers' statistics are now read by
    DuckDB; here the data pages are sound, so every command runs on the rows as stored."""
    prof = _damaged_copy(tmp_path)
    _retype_chunk_in_footer(prof / "steps.parquet", "start_ns")
    assert pq.read_metadata(prof / "steps.parquet").row_group(0).column(2).physical_type == "BOOLEAN"
    # in a child first: the abort would take pytest down with it
    r = subprocess.run(
        [sys.executable, "-m", "dlscope", "summary", str(prof)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-500:]
    assert "23 measured (steps 7-29)" in r.stdout
    _profile_commands_pass(cli, prof, tmp_path)
    steps = json.loads(cli("sql", prof, "select count(*) as n, min(start_ns) as lo from steps", "--format", "json").out)
    undamaged = json.loads(
        cli("sql", MLP_PROFILE, "select count(*) as n, min(start_ns) as lo from steps", "--format", "json").out
    )
    assert steps == undamaged


def test_counters_without_a_device_are_no_gpus_headline(cli, tmp_path):
    """Found by the fuzzer (crash 8234, wrong_parquet on counters.parquet): counters' device
    column all NULL (the schema allows it: PyTorch's memory timeline does not say which device)
    broke the GPU headline of summary and report (int(None), exit 1). A sample without a device
    belongs to no GPU's headline; the counters still read and every command runs."""
    prof = _damaged_copy(tmp_path)
    f = prof / "counters.parquet"
    t = pq.read_table(f)
    i = t.schema.get_field_index("device")
    pq.write_table(t.set_column(i, pa.field("device", pa.int32()), pa.nulls(t.num_rows, pa.int32())), f)
    from dlscope.analysis.core.context import ProfileData
    from dlscope.analysis.reports.gpu_metrics import headline

    assert headline(ProfileData.open(MLP_PROFILE))  # the seed has a headline
    assert headline(ProfileData.open(prof)) == []
    r = cli("sql", prof, "select count(*) as n from counters where device is null", "--format", "json")
    assert r.code == 0 and json.loads(r.out) == [{"n": t.num_rows}], r.err
    _profile_commands_pass(cli, prof, tmp_path)


# ---- found by the long run of seed 46 (2-core VM) ----------------------------------------------
def test_an_sqlite_error_that_quotes_a_damaged_schema_stays_on_one_line(cli, tmp_path):
    """SQLite's message for a damaged schema quotes the schema's own text, newlines and all
    ("malformed database schema (ENUM_...) - unrecognized token ... INTEGER NOT NULL ..."): the
    refusal printed it over several lines. Every error is now one line, whatever its source."""
    seed = tmp_path / "seed.sqlite"
    seed.write_bytes(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    con = sqlite3.connect(seed)
    con.execute("PRAGMA writable_schema = ON")
    # a table's CREATE statement made unparsable, over several lines, as a flipped byte can
    name, sql = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql LIKE '%\n%' LIMIT 1"
    ).fetchone()
    con.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (sql.replace("(", '("\x01', 1), name))
    con.commit()
    con.close()
    r = cli("import", seed, "-o", tmp_path / "x.dlscope")
    assert r.code == 2, r.err
    assert_one_line_error(r.err)
    assert "\n" not in r.err.strip()


# ---- found by the GPU host's run of seed 60 (16 CPUs) --------------------------------------------
def test_phase_marks_without_a_gpu_start_are_malformed_rows(cli, tmp_path):
    """Found by the fuzzer (crash 5717, wrong_parquet on phase_gpu.parquet of the GPT-2 profile):
    gpu_start_ns all NULL made each phase's GPU span NULL and the phase table divided it (TypeError
    in summary, stats, report and diff). A GPU phase mark without both GPU times says nothing: the
    schema now requires them, so the reader leaves such rows out and every command runs."""
    prof = tmp_path / "p.dlscope"
    shutil.copytree(DATA / "phase_gpu" / "gpt2_baseline.dlscope", prof)
    f = prof / "phase_gpu.parquet"
    t = pq.read_table(f)
    i = t.schema.get_field_index("gpu_start_ns")
    keep = t.num_rows // 2  # half the rows lose their GPU start, half keep it
    col = pa.array(t.column(i).to_pylist()[:keep] + [None] * (t.num_rows - keep), pa.int64())
    pq.write_table(t.set_column(i, pa.field("gpu_start_ns", pa.int64()), col), f)
    r = cli("sql", prof, "select count(*) as n from phase_gpu", "--format", "json")
    assert r.code == 0 and json.loads(r.out) == [{"n": keep}], r.err
    s = cli("summary", prof)
    assert s.code == 0 and "GPU span" in s.out, s.err
    _profile_commands_pass(cli, prof, tmp_path)


# ---- found by the GPU host's run of seed 61 (16 CPUs) --------------------------------------------
def test_an_ncu_integer_column_past_float_range_is_unknown(cli, tmp_path):
    """Crash 2748 (a flipped byte): the Device column of one row read "01e400", a float infinity,
    and int() of it failed the import (OverflowError). An integer column whose value is not a
    finite int64 is unknown, as an empty one is; the rest of the row imports."""
    text = (DATA / "gpu" / "h100_ncu_gemm.csv").read_text()
    first_row = text.splitlines()[21]  # a data row (line 22 of the file)
    fields = first_row.split('","')
    fields[9] = "01e400"  # the Device column
    bad = tmp_path / "ncu.csv"
    bad.write_text(text.replace(first_row, '","'.join(fields), 1))
    r = cli("import", bad, "-o", tmp_path / "x.dlscope")
    assert r.code == 0, r.err
    good = cli("import", DATA / "gpu" / "h100_ncu_gemm.csv", "-o", tmp_path / "y.dlscope")
    q = "select count(*) as n, count(device) as with_device from kernel_metrics"
    got = json.loads(cli("sql", tmp_path / "x.dlscope", q, "--format", "json").out)[0]
    want = json.loads(cli("sql", tmp_path / "y.dlscope", q, "--format", "json").out)[0]
    assert good.code == 0 and got["n"] == want["n"] and got["with_device"] == want["with_device"] - 1


def test_an_sqlite_schema_whose_error_is_not_utf8_is_refused_in_one_line(cli, tmp_path):
    """Crash 7549: one byte of the nsys export's schema page flipped to 0xAC; SQLite's error quoted
    it and Python could not decode the message (UnicodeDecodeError, exit 1). Now the refusal of a
    corrupt database, exit 2, one line."""
    data = bytearray(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    data[70753] = 0xAC
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    r = cli("import", bad, "-o", tmp_path / "x.dlscope")
    assert r.code == 2 and "corrupt or truncated SQLite database" in r.err, r.err
    assert_one_line_error(r.err)


def test_a_device_uuid_of_the_wrong_type_is_left_out(cli, tmp_path):
    """Crashes 9332 and 10555 (meta_shape on the GPT-2 profile's meta.json): a device's uuid became
    a list, and the summary's GPU list hashed it (TypeError). A device key of the wrong type is
    left out, as if the source had not said it; every command runs."""
    prof = tmp_path / "p.dlscope"
    shutil.copytree(DATA / "phase_gpu" / "gpt2_baseline.dlscope", prof)
    meta = json.loads((prof / "meta.json").read_text())
    assert meta["devices"] and any(d.get("uuid") for d in meta["devices"])
    for d in meta["devices"]:
        d["uuid"], d["host"] = [1, 2], {"x": 1}
    (prof / "meta.json").write_text(json.dumps(meta))
    s = cli("summary", prof)
    assert s.code == 0 and "NVIDIA H100" in s.out, s.err
    _profile_commands_pass(cli, prof, tmp_path)


def test_an_nsys_name_that_is_not_utf8_imports_with_a_replacement_character(cli, tmp_path):
    """A name whose bytes are not UTF-8 (a damaged export) reads with U+FFFD in their place, as
    the JSON importers read such names, instead of failing the whole import."""
    db = tmp_path / "names.sqlite"
    db.write_bytes(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    con = sqlite3.connect(db)
    sid = con.execute("SELECT k.demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL k LIMIT 1").fetchone()[0]
    con.execute("UPDATE StringIds SET value = CAST(X'6B65726E656CAC' AS TEXT) WHERE id = ?", (sid,))
    con.commit()
    con.close()
    r = cli("import", db, "-o", tmp_path / "x.dlscope")
    assert r.code == 0, r.err
    q = cli(
        "sql",
        tmp_path / "x.dlscope",
        "select count(*) as n from kernels where name = 'kernel\ufffd'",
        "--format",
        "json",
    )
    assert json.loads(q.out)[0]["n"] > 0, q.err
    # read again from the row it broke at: every table as many rows as the clean export gives
    clean = tmp_path / "clean.sqlite"
    clean.write_bytes(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    assert cli("import", clean, "-o", tmp_path / "y.dlscope").code == 0
    count = (
        "select (select count(*) from kernels) as k, (select count(*) from api) as a, (select count(*) from strings)"
        " as s"
    )
    assert json.loads(cli("sql", tmp_path / "x.dlscope", count, "--format", "json").out) == json.loads(
        cli("sql", tmp_path / "y.dlscope", count, "--format", "json").out
    )


# ---- found by the VM's run of seed 70 -----------------------------------------------------------
@pytest.mark.parametrize(("field", "value"), [("start_ns", -(2**63)), ("end_ns", 2**63 - 1)])
def test_a_meta_time_outside_the_time_rule_is_unknown(cli, tmp_path, field, value):
    """Crash 5825 (meta_shape on the MLP profile's meta.json): start_ns became int64's minimum, and
    the timeline's origin overflowed DuckDB's subtraction (OutOfRangeException in stats). A
    meta.json time outside [0, 2**62), which the row rule would call malformed, is unknown: the
    commands fall back as for a profile that never said it."""
    prof = _damaged_copy(tmp_path)
    meta = json.loads((prof / "meta.json").read_text())
    meta[field] = value
    (prof / "meta.json").write_text(json.dumps(meta))
    from dlscope.store.meta import load_meta

    assert getattr(load_meta(prof / "meta.json"), field) is None
    _profile_commands_pass(cli, prof, tmp_path)


class _FilteredConnection:
    """A DuckDB connection whose footer-statistics answers are changed by ``answer``, to stand
    for a DuckDB that names a file differently than asked or fails on all files at once."""

    def __init__(self, con, answer):
        self._con, self._answer = con, answer

    def execute(self, query, params=None):
        if "parquet_metadata" not in query:
            return self._con.execute(query, params) if params is not None else self._con.execute(query)
        return self._answer(self._con, query, params)

    def __getattr__(self, name):
        return getattr(self._con, name)


class _Rows:
    def __init__(self, rows):
        self._rows = rows

    def fetchall(self):
        return self._rows


def test_a_file_whose_footer_statistics_do_not_come_back_is_unknown_not_in_range(monkeypatch):
    """A file with rows whose statistics DuckDB does not return under the name it was asked by
    must count as unknown (its rows checked), never as proven in range; a file without rows is
    empty. The found ranges equal pyarrow's own footer statistics of the sound profile."""
    from dlscope.store import reader

    steps = MLP_PROFILE / "steps.parquet"

    def without_steps(con, query, params):
        return _Rows([r for r in con.execute(query, params).fetchall() if r[0] != str(steps)])

    real_connect = reader.db.connect
    monkeypatch.setattr(reader.db, "connect", lambda **kw: _FilteredConnection(real_connect(**kw), without_steps))
    prof = reader.open_profile(MLP_PROFILE)
    assert "steps" in prof.check_times
    ranges = reader._time_ranges(
        prof.connection, prof.files, {f: pq.read_metadata(f).num_rows for fs in prof.files.values() for f in fs}
    )
    assert ranges[steps] is None
    kernels = prof.files["kernels"][0]
    md = pq.read_metadata(kernels)
    cols = [md.schema.names.index(c) for c in ("start_ns", "end_ns")]
    stats = [md.row_group(g).column(c).statistics for g in range(md.num_row_groups) for c in cols]
    assert ranges[kernels] == (min(s.min for s in stats), max(s.max for s in stats))
    assert reader._time_ranges(prof.connection, {"steps": [steps]}, {steps: 0}) == {steps: reader.EMPTY}


def test_footers_that_read_alone_but_not_together_are_one_line(monkeypatch):
    """If DuckDB fails on all the files at once but reads each alone, the refusal is still the
    one-line damaged-table error naming the profile, not DuckDB's exception passed up."""
    import duckdb

    from dlscope.errors import ProfileFormatError
    from dlscope.store import reader

    def fail_together(con, query, params):
        if len(params[0]) > 1:
            raise duckdb.IOException("Could not read footers together")
        return con.execute(query, params)

    real_connect = reader.db.connect
    monkeypatch.setattr(reader.db, "connect", lambda **kw: _FilteredConnection(real_connect(**kw), fail_together))
    with pytest.raises(ProfileFormatError) as e:
        reader.open_profile(MLP_PROFILE)
    assert str(e.value) == f"{MLP_PROFILE}: corrupt or truncated table file (Could not read footers together)"


# ---- found by the 4-GPU host's runs of seeds 122 and 123 (source c3ce5e5c1a35438a) ---------------
def test_an_xplane_step_number_past_int32_is_a_malformed_step_not_a_crash(cli, tmp_path):
    """Seed 122, input 19307: a flipped byte in a TensorFlow XSpace gave a step annotation the
    step number 5606754636920881028. Building the steps table raised ArrowInvalid (exit 1). A
    value its integer column cannot hold is now unknown, and a step without its number is left
    out and counted; the sound step stays."""
    from .xspace_writer import Ev, Ln, Pl, xspace

    huge = 5606754636920881028
    host = Pl(
        1,
        "/host:CPU",
        [
            Ln(
                11,
                "python",
                [
                    Ev("train", 0, 1_000_000, {"step_num": 3}),
                    Ev("train", 2_000_000, 1_000_000, {"step_num": huge}),
                    Ev("compute", 2_100_000, 500_000),
                ],
            )
        ],
        {"process_id": 4242},
    )
    env = Pl(4, "Task Environment", [], {"profile_start_time": 1_800_000_000_000_000_000})
    trace = tmp_path / "vm.xplane.pb"
    trace.write_bytes(xspace([host, env]))
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 0, r.err
    notes = json.loads((tmp_path / "p.dlscope" / "meta.json").read_text())["notes"]
    assert any(n.startswith("1 malformed row(s) of steps not stored") for n in notes), notes
    steps = json.loads(
        cli("sql", tmp_path / "p.dlscope", "select step, end_ns - start_ns as ns from steps", "--format", "json").out
    )
    assert steps == [{"step": 3, "ns": 1_000_000}]
    _profile_commands_pass(cli, tmp_path / "p.dlscope", tmp_path)


def test_an_nsys_name_stored_as_an_integer_is_its_digits_not_a_crash(cli, tmp_path):
    """Seed 123, input 16343: a flipped byte in an nsys export left a StringIds value typed as an
    integer (SQLite keeps each value's own type). Decoding the names raised ArrowTypeError (exit
    1). Such a name is now read as its digits, as a number in nsys's text columns always was;
    every kernel is kept."""
    seed = tmp_path / "seed.sqlite"
    seed.write_bytes(gzip.decompress((DATA / "nsys" / "h100_nsys_mlp.sqlite.gz").read_bytes()))
    con = sqlite3.connect(seed)
    kernel_table = "CUPTI_ACTIVITY_KIND_KERNEL"
    name_id, uses = con.execute(
        f"SELECT demangledName, count(*) FROM {kernel_table} GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
    ).fetchone()
    total = con.execute(f"SELECT count(*) FROM {kernel_table}").fetchone()[0]
    # the column's TEXT affinity would turn 1234 into '1234': drop it, as a damaged record can
    con.execute("PRAGMA writable_schema = ON")
    con.execute(
        "UPDATE sqlite_master SET sql = replace(sql, 'TEXT      NOT NULL', 'NOT NULL') WHERE name = 'StringIds'"
    )
    con.commit()
    con.close()
    con = sqlite3.connect(seed)
    con.execute("UPDATE StringIds SET value = 1234 WHERE id = ?", (name_id,))
    con.commit()
    assert con.execute("SELECT typeof(value) FROM StringIds WHERE id = ?", (name_id,)).fetchone() == ("integer",)
    con.close()
    prof = tmp_path / "x.dlscope"
    r = cli("import", seed, "-o", prof)
    assert r.code == 0, r.err
    got = json.loads(
        cli(
            "sql",
            prof,
            "select count(*) as n, count(*) filter (where name = '1234') as unnamed from kernels",
            "--format",
            "json",
        ).out
    )
    assert got == [{"n": total, "unnamed": uses}]
    _profile_commands_pass(cli, prof, tmp_path)


def test_an_ncu_launch_id_past_int32_is_a_malformed_row_not_a_crash(cli, tmp_path):
    """Found by reading the code after seed 122's XPlane crash (the same class): an ncu CSV whose
    "ID" is 99999999999 fit the importer's int64 check but not the int32 launch column
    (ArrowInvalid, exit 1). It is now unknown, and the row, whose launch is required, is left out
    and counted; the other rows stay."""
    src = DATA / "gpu" / "h100_ncu_gemm.csv"
    text = src.read_text()
    header = text.index('"ID",')
    rows = list(csv.reader(io.StringIO(text[header:])))
    rows[1][rows[0].index("ID")] = "99999999999"
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    damaged = tmp_path / "ncu.csv"
    damaged.write_text(text[:header] + out.getvalue())
    prof = tmp_path / "n.dlscope"
    r = cli("import", damaged, "-o", prof)
    assert r.code == 0, r.err
    assert cli("import", src, "-o", tmp_path / "sound.dlscope").code == 0
    count = "select count(*) as n from kernel_metrics"
    sound = json.loads(cli("sql", tmp_path / "sound.dlscope", count, "--format", "json").out)[0]["n"]
    assert json.loads(cli("sql", prof, count, "--format", "json").out) == [{"n": sound - 1}]
    notes = json.loads((prof / "meta.json").read_text())["notes"]
    assert any(n.startswith("1 malformed row(s) of kernel_metrics not stored") for n in notes), notes
    _profile_commands_pass(cli, prof, tmp_path)


def test_an_execution_trace_rf_id_past_int64_matches_no_op(cli, tmp_path):
    """Found by reading the code after seed 122's crash (the same class): a node whose rf_id is
    past int64 made the table of nodes fail to build (OverflowError, exit 1) when the execution
    trace came with its Kineto trace. It now matches no op; the other nodes still do."""
    folder = tmp_path / "et"
    shutil.copytree(CORPUS / "execution_trace", folder)
    et = folder / "benchmark_simple_add_et.json.gz"
    doc = json.loads(gzip.decompress(et.read_bytes()))
    sound = tmp_path / "sound.dlscope"
    assert cli("import", CORPUS / "execution_trace", "-o", sound).code == 0
    matched = next(
        int(n.split()[6])
        for n in json.loads((sound / "meta.json").read_text())["notes"]
        if "taken from the execution trace" in n
    )
    node = next(n for n in doc["nodes"] if isinstance(n.get("rf_id"), int) and n["rf_id"] > 0)
    assert sum(n.get("rf_id") == node["rf_id"] for n in doc["nodes"]) == 1
    kineto = json.loads(gzip.decompress((folder / "benchmark_simple_add_trace.json.gz").read_bytes()))
    ops = sum(
        e.get("cat") == "cpu_op" and e["args"].get("Record function id", e["args"].get("External id")) == node["rf_id"]
        for e in kineto["traceEvents"]
    )
    assert ops > 0
    node["rf_id"] = 2**64
    et.write_bytes(gzip.compress(json.dumps(doc).encode()))
    prof = tmp_path / "p.dlscope"
    r = cli("import", folder, "-o", prof)
    assert r.code == 0, r.err
    notes = json.loads((prof / "meta.json").read_text())["notes"]
    assert (
        f"benchmark_simple_add_et.json.gz: input shapes and types of {matched - ops} ops taken from the execution trace"
        in notes
    ), notes
    # the node lost is counted on its own line; the sound trace's rf_id 0 roots are not losses
    lost = "execution-trace node(s) with an rf_id that is not a positive 64-bit integer matched no op"
    assert f"1 {lost}" in notes, notes
    assert not any(lost in n for n in json.loads((sound / "meta.json").read_text())["notes"])
    others = [n for n in doc["nodes"] if isinstance(n.get("rf_id"), int) and n["rf_id"] > 0 and n is not node]
    for n, bad in zip(others, [-3, "12", True]):
        n["rf_id"] = bad
    et.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert cli("import", folder, "-o", prof, "-f").code == 0
    assert f"4 {lost}" in json.loads((prof / "meta.json").read_text())["notes"]


def test_a_memory_timeline_number_past_int64_is_one_line(cli, tmp_path):
    """Found by reading the importers after seed 122's crash (the same class), when the fuzzer
    gained memory timelines: a time past int64 made numpy raise OverflowError (exit 1). The file
    is refused as not a memory timeline, like any row that is not four int64s."""
    trace = tmp_path / "m.raw.json"
    trace.write_text(json.dumps([[1, 0, 512, 7], [2**64, 1, 512, 7]]))
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)
    assert "not a memory timeline" in r.err


def test_no_duckdb_result_is_read_one_row_at_a_time():
    """The class of seed 141's crash: DuckDB 2 keeps a result read with ``fetchone``/``fetchmany``
    open, and the connection's next ``sql()`` is refused (exit 1, far from the read). Only the
    nsys importer's SQLite cursor may read that way."""
    import re

    src = Path(fuzz_inputs.__file__).resolve().parents[1] / "src" / "dlscope"
    found = [
        f"{p.relative_to(src)}:{i}"
        for p in sorted(src.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\.fetch(one|many)\(", line)
    ]
    assert found and all(f.startswith("importers/nsys_db.py:") for f in found), found


def test_an_ncu_csv_with_a_repeated_column_name_is_one_line_or_read_by_the_first(cli, tmp_path):
    """VM seed 150, input 9927: a details CSV with its "Metric Name" column dropped (so it reads as
    the raw page) and "Estimated Speedup Type" renamed "ID". The importer indexed the last "ID" in
    the first row, which the details page leaves shorter than the header (the rule columns are
    only in the rules' rows): IndexError, exit 1. Now rows shorter than the raw
    page's header are refused with one line before any is read, and a repeated column name means
    its first column."""
    src = DATA / "gpu" / "h100_ncu_gemm.csv"
    text = src.read_text()
    header = text.index('"ID",')
    rows = list(csv.reader(io.StringIO(text[header:])))
    rows[0][rows[0].index("Metric Name")] = "Metric"
    rows[0][rows[0].index("Estimated Speedup Type")] = "ID"
    assert any(len(r) <= max(i for i, n in enumerate(rows[0]) if n == "ID") for r in rows[1:])
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    damaged = tmp_path / "ncu.csv"
    damaged.write_text(text[:header] + out.getvalue())
    r = cli("import", damaged, "-o", tmp_path / "d.dlscope")
    assert r.code == 2 and "truncated row" in r.err, r.err
    assert_one_line_error(r.err)
    # the raw page with its last metric column named "ID" too: the launches are the first column's
    raw = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Device","gpu__time_duration.sum","ID"\n'
        '"","","","","","","usecond",""\n'
        '"0","9","python","h","k","0","2.5","7"\n"1","9","python","h","k","0","3.5","7"\n'
    )
    (tmp_path / "raw.csv").write_text(raw)
    prof = tmp_path / "r.dlscope"
    assert cli("import", tmp_path / "raw.csv", "-o", prof).code == 0
    got = json.loads(
        cli(
            "sql",
            prof,
            "select launch, value from kernel_metrics where metric = 'gpu__time_duration.sum' order by launch",
            "--format",
            "json",
        ).out
    )
    assert got == [{"launch": 0, "value": 2500.0}, {"launch": 1, "value": 3500.0}]
