"""Bad input never crashes: malformed records an importer lets through, and a short mutation fuzz.

The fuzz (mutations and the property in tests/fuzz_inputs.py) is derandomized and small, so that
CI runs the same few inputs every time; bench/fuzz.py runs it for minutes and records its counts
in bench/RESULTS.md. Every crash it found has its own regression test here.
"""

from __future__ import annotations

import gzip
import json
import random
import sqlite3
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
    r = cli("sql", prof, "select (select count(*) from ops) + (select count(*) from api) + "
                         "(select count(*) from kernels) + (select count(*) from phases) as n, "
                         "(select count(*) from kernels where start_ns is null) as null_starts", "--format", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)[0]
    assert row["null_starts"] == 0
    kept = json.loads(gzip.decompress(SIMPLE_ADD.read_bytes()))["traceEvents"]
    kept_x = [e for e in kept if e.get("ph") == "X"]
    del kept_x[::3]
    imported_cats = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel"}
    assert row["n"] == sum(1 for e in kept_x if e.get("cat", "").lower() in imported_cats
                           and not e.get("name", "").startswith("ProfilerStep#"))
    (tmp_path / "w").mkdir()
    ran, problems = fuzz_inputs.check_input(trace, tmp_path / "w", _runner(cli))
    assert ran and problems == []
    assert (tmp_path / "w" / "x.html").stat().st_size > 10_000


def test_builder_drops_rows_the_schema_forbids_and_notes_them(tmp_path):
    """Whatever importer lets a NULL time, a time outside [0, 2**62) or an end before its start
    through, the builder keeps it out of the profile and says so in the notes."""
    from dlscope.store.meta import Meta

    b = ProfileBuilder()
    b.add("kernels", pa.table({"rank": [0] * 6, "start_ns": [10, None, 30, 40, -5, 60], "end_ns": [20, 25, 29, 50, 7, 2**62],
                               "name": ["a", "b", "c", "d", "e", "f"]}))
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

    top = pa.table({"name": ["k<script>"], "count": pa.array([None], pa.int64()), "total_ns": [None],
                    "mean_ns": pa.array([None], pa.float64()), "pct": pa.array([None], pa.float64())})
    html = details.kernels_section(top, None)
    assert "k&lt;script&gt;" in html and "<script>" not in html
    assert html.count('<td class="num">-</td>') == 4
    ops = pa.table({"name": ["op"], "count": pa.array([None], pa.int64()), "self_ns": [None], "total_ns": [5_000_000],
                    "pct": pa.array([None], pa.float64())})
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
    assert f"{bad} malformed row(s) of kernels not stored" in " ".join(json.loads((prof / "meta.json").read_text())["notes"])
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
    data = {"truncated": raw[: len(raw) // 2], "not_json": b'{"traceEvents": [{"ph": "X" "ts": 1}]}',
            "events_not_a_list": b'{"traceEvents": [1, "two", null]}'}[what]
    trace = tmp_path / "t.json"
    trace.write_bytes(data)
    r = cli("import", trace, "-o", tmp_path / "p.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


# ---- the fuzz -----------------------------------------------------------------------------------

FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _fuzz_one(cli, rng: random.Random, kind: str) -> None:
    m = fuzz_inputs.mutant(rng, kind)
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-") as d:
        path = Path(d) / f"input{m.suffix}"
        path.write_bytes(m.data)
        work = Path(d) / "w"
        work.mkdir()
        _, problems = fuzz_inputs.check_input(path, work, _runner(cli))
    assert problems == [], f"{m.kind} input from {m.seed} ({m.how}): {problems}"


@settings(FUZZ, max_examples=16)
@given(rng=st.randoms(use_true_random=False))
def test_fuzz_kineto(cli, rng):
    _fuzz_one(cli, rng, "kineto")


@settings(FUZZ, max_examples=10)
@given(rng=st.randoms(use_true_random=False), kind=st.sampled_from(["execution_trace", "ncu", "nsys"]))
def test_fuzz_other_formats(cli, rng, kind):
    _fuzz_one(cli, rng, kind)
