"""A JAX program profiled unchanged (issue 40): without step annotations its steps are the runs of
its repeated jit executable (importers/jit_steps.py).

Real inputs with one fact changed: the CPU XSpace (tests/data/jax/cpu_mlp, 4 annotated steps) read
with its ``step_num`` stats dropped, and the H100 profile (tests/data/gpu_h100/jax_mlp.dlscope, 6
traced annotated steps) with its steps table ignored. The derived steps are checked against the
annotated ones read independently (the XSpace's own events, the stored steps and kernels).

Tolerance, from the data: the program's steps are ``StepTraceAnnotation`` ranges around
``next_batch`` ('data') and ``train_step`` plus ``loss.block_until_ready()`` ('compute'). A derived
step ends when the training step's run completes, so each derived boundary must fall inside the
annotated step's 'compute' phase, before the host returns from the wait (on the H100 the
annotation closes 125-248 us after the step's last kernel; on the CPU 19-156 us after the run).
The mean step over the steps after the first differs only by the change of that gap from the
first to the last boundary (the steps tile the run): within 5%.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean

import duckdb
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize
from dlscope.importers import xprof
from dlscope.importers.jit_steps import MIN_RUNS, OpEvent, TimeBasis, choose, executables, module_name, steps_table
from dlscope.importers.xplane_pb import parse_xspace

from .conftest import DATA, q

JAX_XSPACE = DATA / "jax" / "cpu_mlp"
H100 = DATA / "gpu_h100" / "jax_mlp.dlscope"
MEAN_STEP_TOLERANCE = 0.05  # see the module's docstring


def _xspace() -> Path:
    found = sorted(JAX_XSPACE.rglob("*.xplane.pb"))
    if not found:
        pytest.skip(f"{JAX_XSPACE} is missing")
    return found[0]


def _without_step_annotations(data: bytes):  # the parse, with the one fact removed
    planes, hosts = parse_xspace(data)
    for p in planes:
        for line in p.lines:
            for e in line.events:
                e.stats.pop("step_num", None)
    return planes, hosts


def _annotated(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(steps, 'compute' phases) as epoch-ns spans, straight from the XSpace's host events."""
    planes, _ = parse_xspace(path.read_bytes())
    base = xprof.start_time_ns(planes)
    assert base is not None
    host = next(p for p in planes if p.name == "/host:CPU")
    events = [e for line in host.lines for e in line.events]
    steps = sorted((base + e.start_ns, base + e.start_ns + e.dur_ns) for e in events if "step_num" in e.stats)
    compute = sorted((base + e.start_ns, base + e.start_ns + e.dur_ns) for e in events if e.name == "compute")
    return steps, compute


def _spans(table) -> list[tuple[int, int]]:
    return [(r["start_ns"], r["end_ns"]) for r in table.sort_by("step").to_pylist()]


def _mean_after_first(spans: list[tuple[int, int]]) -> float:
    return mean(e - s for s, e in spans[1:])


def test_cpu_xspace_without_annotations_gets_its_annotated_steps(monkeypatch):
    path = _xspace()
    steps, compute = _annotated(path)
    assert len(steps) == len(compute) == 4  # make_trace.py: 4 steps
    monkeypatch.setattr(xprof, "parse_xspace", _without_step_annotations)
    res = xprof.read_xspace(path.read_bytes())
    derived = res.tables["steps"]
    assert set(derived.column("source").to_pylist()) == {"jit_executable"}
    got = _spans(derived)
    assert abs(len(got) - len(steps)) <= 1
    for (_, end), (c0, c1), (s0, s1) in zip(got, compute, steps):
        assert s0 <= c0 <= end <= c1 <= s1  # inside the step's 'compute' phase
    for (start, _), (c0, c1) in zip(got[1:], compute):  # a step starts where the previous run completed
        assert c0 <= start <= c1
    assert abs(_mean_after_first(got) / _mean_after_first(steps) - 1) < MEAN_STEP_TOLERANCE
    # the train step (most module time) was taken; the data step ran as often, and the note says so
    assert res.steps_note is not None
    assert "jit_train_step (jit(train_step))" in res.steps_note and "jit_next_batch (4 runs" in res.steps_note


def test_imported_profile_says_where_its_steps_came_from(monkeypatch, cli, tmp_path):
    path = _xspace()
    monkeypatch.setattr(xprof, "parse_xspace", _without_step_annotations)
    out = tmp_path / "jax.dlscope"
    assert cli("import", path, "-o", out).code == 0
    data = ProfileData.open(out)
    assert q(data.con, "SELECT DISTINCT source FROM steps") == [("jit_executable",)]
    s = summarize(data)
    assert s.steps.source == "jit_executable" and s.steps.total_steps == 4
    assert any("derived from the 4 runs of the jit executable jit_train_step" in n for n in s.notes)
    assert not any("no step annotations" in n for n in s.notes)
    text = cli("summary", out).out
    assert "the runs of the program's repeated jit executable" in text


def _h100_ops() -> list[OpEvent]:
    if not H100.is_dir():
        pytest.skip(f"{H100} is missing")
    rows = duckdb.sql(f"""
        SELECT o.category, s.value, o.start_ns, o.end_ns, o.tid FROM '{H100}/ops.parquet' o
        JOIN '{H100}/strings.parquet' s ON s.id = o.name_id
        WHERE o.category IN ('jax_function', 'xla_module')""").fetchall()
    return [OpEvent(*r) for r in rows]


def test_h100_profile_without_its_steps_gets_its_annotated_steps():
    found = {e.module: e for e in executables(_h100_ops())}
    # the eager initialisation's jit(add) ran most often: the count alone would pick it
    assert len(found["jit_add"].runs) == 200 > len(found["jit_train_step"].runs) == 6
    choice = choose(list(found.values()))
    assert choice is not None and choice.taken.module == "jit_train_step" and choice.basis is TimeBasis.MODULE
    # the eager ops add, bitwise_xor, bitwise_or, multiply, subtract and the data step ran >= 6 times
    assert {e.module for e in choice.as_often} == {
        f"jit_{n}" for n in ("add", "bitwise_xor", "bitwise_or", "multiply", "subtract", "next_batch")
    }
    assert choice.note().endswith(" and 3 more")
    got = _spans(steps_table(choice, 0, 497))
    annotated = q(duckdb.connect(), f"SELECT start_ns, end_ns FROM '{H100}/steps.parquet' WHERE traced ORDER BY step")
    assert len(annotated) == 6 and abs(len(got) - len(annotated)) <= 1
    con = duckdb.connect()
    for (_, end), (s0, s1) in zip(got, annotated):
        # the run's completion: the step's last kernel (read from the kernels alone), before the host's return
        last_kernel = q(
            con, f"SELECT max(end_ns) FROM '{H100}/kernels.parquet' WHERE start_ns >= {s0} AND start_ns < {s1}"
        )
        assert end == last_kernel[0][0] and s0 < end <= s1
    assert abs(_mean_after_first(got) / _mean_after_first(annotated) - 1) < MEAN_STEP_TOLERANCE


# ---- the choice, on hand-made runs (times in ns) ------------------------------------------------


def _call(name: str, s: int, e: int) -> OpEvent:
    return OpEvent("jax_function", name, s, e, 1)


def _module(name: str, s: int, e: int, tid: int = 99) -> OpEvent:
    return OpEvent("xla_module", name, s, e, tid)


def test_train_and_eval_repeating_equally_take_the_most_module_time():
    ops = []
    for i in range(3):
        t = i * 1000
        ops += [_call("jit(train)", t, t + 10), _module("jit_train", t + 20, t + 500)]
        ops += [_call("jit(eval)", t + 600, t + 610), _module("jit_eval", t + 620, t + 700)]
    choice = choose(executables(ops))
    assert choice is not None and choice.taken.module == "jit_train"
    assert [e.module for e in choice.as_often] == ["jit_eval"]
    assert "jit_eval (3 runs, 0.000 ms)" in choice.note()
    # each step ends where a train run completes; the first starts at its launch
    assert _spans(steps_table(choice, 0, 7)) == [(0, 500), (500, 1500), (1500, 2500)]


def test_a_run_dispatched_ahead_pairs_with_its_own_module_run():
    # asynchronous dispatch: the second call returns before the first run ends
    ops = [_call("jit(step)", 0, 10), _call("jit(step)", 20, 30), _module("jit_step", 15, 100)]
    ops += [_module("jit_step", 100, 180), _module("jit_step", 110, 170, tid=98)]  # a second stream
    (ex,) = executables(ops)
    assert [(r.start_ns, r.end_ns) for r in ex.runs] == [(0, 100), (20, 180)]
    assert ex.module_ns == 85 + 80


def test_modules_alone_and_too_few_runs():
    assert module_name("jit(<lambda>)") == "jit__lambda_"
    # no host call recorded: the module runs; an autotuning module (not jit_/pmap_) is no candidate
    ops = [_module("jit_step", 0, 50), _module("jit_step", 60, 110), _module("gemm_fusion_dot", 0, 10**6)]
    choice = choose(executables(ops))
    assert choice is not None and choice.taken.call is None and len(choice.taken.runs) == MIN_RUNS
    assert choose(executables([_call("jit(once)", 0, 10), _module("jit_once", 0, 10)])) is None
    # no module time anywhere: the host calls' time decides
    host_only = [_call("jit(a)", 0, 5), _call("jit(a)", 10, 15), _call("jit(b)", 20, 40), _call("jit(b)", 50, 70)]
    choice = choose(executables(host_only))
    assert choice is not None and choice.taken.module == "jit_b" and choice.basis is TimeBasis.HOST_CALLS


def test_recorded_unannotated_program_gets_the_derived_steps(monkeypatch, tmp_path):
    """The capture side: the spool as `dlscope profile` leaves it for a program that annotated no
    steps and called no dlscope.step() (the header's steps empty), decoded with a warm-up step."""
    import json
    import shutil

    from dlscope.capture.base import DecodeContext
    from dlscope.capture.jax_layer import JaxCollector

    path = _xspace()
    steps, _ = _annotated(path)
    pid = 42
    shutil.copytree(path.parents[3], tmp_path / f"{pid}.jax")
    header = {"marker": None, "window": [], "app_steps": 0, "framework": "jax", "steps": [], "tid": 1}
    (tmp_path / f"{pid}.jax.json").write_text(json.dumps(header))
    monkeypatch.setattr(xprof, "parse_xspace", _without_step_annotations)
    ctx = DecodeContext(pid=pid, rank=0, offset_ns=0, session={"schedule": {"warmup": 1}})
    table = JaxCollector.decode(tmp_path, pid, ctx)["steps"]
    assert set(table.column("source").to_pylist()) == {"jit_executable"}
    assert table.column("warmup").to_pylist() == [True, False, False, False]
    assert len(table) == len(steps)
    assert any(n.startswith(f"process {pid}: steps: none annotated; derived from the 4 runs") for n in ctx.notes)
