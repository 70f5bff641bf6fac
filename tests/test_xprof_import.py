"""JAX and TensorFlow profiler traces (XProf XSpace) imported into profiles.

Data: tests/data/jax/cpu_mlp (jax.profiler, 4 steps of a jitted MLP) and tests/data/tf/cpu_keras
(tf.profiler.experimental, 4 steps of a Keras MLP); both made by the make_trace.py beside them.
The JAX numbers are checked against JAX's own JSON conversion of the same trace (written beside
the XSpace by jax.profiler), the TensorFlow ones against the model's structure.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.tensor_core_kernels import is_tensor_core_eligible_op
from dlscope.analysis.reports.op_sum import compute as op_sum
from dlscope.analysis.reports.tensor_core import compute as tensor_core
from dlscope.importers.xplane_pb import parse_xspace
from dlscope.importers.xprof import start_time_ns
from dlscope.store.reader import open_profile

from .conftest import DATA, assert_one_line_error, q

JAX_DIR = DATA / "jax" / "cpu_mlp"
TF_DIR = DATA / "tf" / "cpu_keras"


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.rglob(pattern))
    if not found:
        pytest.skip(f"{folder} is missing")
    return found[0]


@pytest.fixture(scope="module")
def jax_profile(tmp_path_factory) -> Path:
    from dlscope.cli import main

    out = tmp_path_factory.mktemp("jax") / "jax.dlscope"
    assert main(["import", str(_one(JAX_DIR, "*.xplane.pb").parents[2].parent), "-o", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def tf_profile(tmp_path_factory) -> Path:
    from dlscope.cli import main

    out = tmp_path_factory.mktemp("tf") / "tf.dlscope"
    assert main(["import", str(_one(TF_DIR, "*.xplane.pb")), "-o", str(out)]) == 0
    return out


def _jax_json() -> list[dict]:
    with gzip.open(_one(JAX_DIR, "*.trace.json.gz")) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _base_ns() -> int:
    planes, _ = parse_xspace(_one(JAX_DIR, "*.xplane.pb").read_bytes())
    base = start_time_ns(planes)
    assert base and base > 1.7e18  # a 2020s epoch time
    return base


def test_jax_steps_match_jax_own_conversion(jax_profile):
    ref = sorted(
        (int(e["args"]["step_num"]), round(e["ts"] * 1000), round(e["dur"] * 1000))
        for e in _jax_json()
        if "step_num" in e.get("args", {})
    )
    assert [r[0] for r in ref] == [0, 1, 2, 3]
    base = _base_ns()
    data = ProfileData.open(jax_profile)
    got = q(data.con, "SELECT step, start_ns, end_ns - start_ns, source FROM steps ORDER BY step")
    assert [g[0] for g in got] == [0, 1, 2, 3] and {g[3] for g in got} == {"profiler_step"}
    for (step, ts, dur), (_, start, length, _) in zip(ref, got):
        assert abs(start - base - ts) <= 1 and abs(length - dur) <= 1, step


def test_jax_hlo_ops_match_jax_own_conversion(jax_profile):
    ref_n: Counter[str] = Counter()
    ref_ns: Counter[str] = Counter()
    for e in _jax_json():
        op = e.get("args", {}).get("hlo_op")
        if op:
            ref_n[op] += 1
            ref_ns[op] += round(e["dur"] * 1000)
    assert len(ref_n) >= 20 and set(ref_n.values()) == {4}  # every HLO op of the MLP ran once per step
    data = ProfileData.open(jax_profile)
    got = q(
        data.con, "SELECT name, count(*), sum(end_ns - start_ns)::BIGINT FROM ops WHERE category = 'hlo_op' GROUP BY 1"
    )
    assert {n: c for n, c, _ in got} == dict(ref_n)
    for name, count, ns in got:
        assert abs(ns - ref_ns[name]) <= count, name  # each event's ns rounded once
    # each module run encloses its HLO ops: the jitted train step, next_batch's add
    modules = q(data.con, "SELECT name, count(*) FROM ops WHERE category = 'xla_module' GROUP BY 1 ORDER BY 1")
    assert modules == [("jit_next_batch", 4), ("jit_train_step", 4)]
    assert q(
        data.con,
        """SELECT count(*) FROM ops o JOIN ops p ON p.op_id = o.parent_id
                          WHERE o.category = 'hlo_op' AND p.category = 'xla_module'""",
    ) == [(sum(ref_n.values()),)]
    # the jitted function calls, once per call (PjitFunction nests a second event of its own name)
    assert q(data.con, "SELECT name, count(*) FROM ops WHERE category = 'jax_function' GROUP BY 1 ORDER BY 1") == [
        ("jit(next_batch)", 4),
        ("jit(train_step)", 4),
    ]


def test_jax_phases_are_the_program_annotations(jax_profile):
    ref = Counter(e["name"] for e in _jax_json() if e["name"] in ("data", "compute"))
    data = ProfileData.open(jax_profile)
    got = dict(q(data.con, "SELECT name, count(*) FROM phases GROUP BY 1"))
    assert got == dict(ref) == {"data": 4, "compute": 4}  # nothing of JAX's runtime among them
    # every phase lies in its step
    assert q(data.con, "SELECT count(*) FROM phases WHERE step IS NULL") == [(0,)]


def test_jax_ops_carry_their_source_line(jax_profile):
    script = (DATA / "jax" / "make_trace.py").read_text().splitlines()
    data = ProfileData.open(jax_profile)
    rows = q(data.con, "SELECT DISTINCT name, source FROM ops WHERE category = 'hlo_op' AND source IS NOT NULL")
    assert all(src.startswith("jit(") for _, src in rows)  # the JAX op path, always
    rows = [(n, src) for n, src in rows if "make_trace.py:" in src]  # a line where XLA kept one
    assert len(rows) >= 15
    for name, source in rows:
        m = re.fullmatch(r"jit\((\w+)\)/.* \(make_trace\.py:(\d+) ([\w.<>]+)\)", source)
        assert m, (name, source)
        line = script[int(m.group(2)) - 1]
        # the line holds the array math the op came from
        assert any(tok in line for tok in ("@", "relu", "mean", "0.01", "+ step")), (name, source, line)
    by_name = dict(rows)
    assert "dot_general" in by_name["ynn_fusion.6"] and "loss_fn" in by_name["ynn_fusion.6"]
    table = op_sum(data).table
    assert "source" in table.column_names


def test_jax_reports_timeline_and_advice_run(jax_profile, cli, tmp_path):
    for args in (
        ("stats", jax_profile, "--report", "all", "--format", "json"),
        ("advise", jax_profile),
        ("summary", jax_profile),
        ("export", jax_profile, "-o", tmp_path / "t.json"),
    ):
        r = cli(*args)
        assert r.code == 0, (args, r.err)
    trace = json.loads((tmp_path / "t.json").read_text())
    names = Counter(e.get("name") for e in trace["traceEvents"] if e.get("ph") == "X")
    assert names["dot.2"] == 4 and names["train"] + names["ProfilerStep#0"] >= 1
    # the tensor-core report's eligibility knows XLA's and TensorFlow's matrix ops
    data = ProfileData.open(jax_profile)
    names = [n for (n,) in q(data.con, "SELECT DISTINCT name FROM ops WHERE category = 'hlo_op'")]
    assert {n for n in names if is_tensor_core_eligible_op(n)} == {"dot", "dot.1", "dot.2"}


def test_tf_steps_phases_and_graph_ops(tf_profile):
    data = ProfileData.open(tf_profile)
    assert q(data.con, "SELECT step, source FROM steps ORDER BY step") == [(i, "profiler_step") for i in range(4)]
    assert dict(q(data.con, "SELECT name, count(*) FROM phases GROUP BY 1")) == {"data": 4, "compute": 4}
    cats = dict(q(data.con, "SELECT category, count(*) FROM ops GROUP BY 1"))
    assert cats["tf_function"] == 4 and cats["tf_op"] > 100
    # per step: Dense(128) and Dense(10) forward as two _FusedMatMul; backward: Dense(10)'s input and
    # weight gradients, Dense(128)'s weight gradient only (its input needs none): three MatMul
    per_step = q(
        data.con,
        """SELECT step, count(*) FILTER (WHERE name LIKE '%:\\_FusedMatMul' ESCAPE '\\'),
                                     count(*) FILTER (WHERE name LIKE '%:MatMul')
                              FROM ops WHERE category = 'tf_op' GROUP BY 1 ORDER BY 1""",
    )
    assert per_step == [(i, 2, 3) for i in range(4)]
    # graph ops run inside the train_step function call of their step
    assert q(
        data.con,
        """SELECT count(*) FROM ops o WHERE o.category = 'tf_op' AND NOT EXISTS (
                              SELECT 1 FROM ops f WHERE f.category = 'tf_function'
                              AND o.start_ns >= f.start_ns AND o.end_ns <= f.end_ns)""",
    ) == [(0,)]
    assert q(data.con, "SELECT name FROM ops WHERE category = 'tf_eager_op' GROUP BY 1 ORDER BY 1") == [
        ("AddV2",),
        ("_EagerConst",),
    ]


def test_tf_reports_timeline_and_advice_run(tf_profile, cli, tmp_path):
    for args in (
        ("stats", tf_profile, "--report", "all", "--format", "json"),
        ("advise", tf_profile),
        ("export", tf_profile, "-o", tmp_path / "t.json"),
    ):
        r = cli(*args)
        assert r.code == 0, (args, r.err)
    data = ProfileData.open(tf_profile)
    names = [n for (n,) in q(data.con, "SELECT DISTINCT name FROM ops WHERE category = 'tf_op'")]
    eligible = {n for n in names if is_tensor_core_eligible_op(n)}
    assert eligible == {n for n in names if n.endswith((":MatMul", ":_FusedMatMul"))} and len(eligible) == 5


@pytest.mark.parametrize("cut", [10, 1000, 100_000])
def test_truncated_xspace_is_one_line(tmp_path, cli, cut):
    data = _one(JAX_DIR, "*.xplane.pb").read_bytes()[:cut]
    bad = tmp_path / "host.xplane.pb"
    bad.write_bytes(data)
    r = cli("import", bad, "-o", tmp_path / "b.dlscope")
    assert r.code == 2
    assert_one_line_error(r.err)


def _gpu_xspace() -> bytes:
    """A GPU run's XSpace as XLA's CUPTI tracer writes it (see tests/xspace_writer.py): one step;
    on stream 7 a module of two HLO ops, the first a cuBLAS GEMM of two kernels; a copy; a kernel
    XLA did not annotate; the launches on /host:CUPTI."""
    from .xspace_writer import Ev, Ln, Pl, hlo_proto, xspace

    t0 = 1_800_000_000_000_000_000
    host = Pl(
        1,
        "/host:CPU",
        [
            Ln(
                11,
                "python",
                [
                    Ev("train", 0, 1_000_000, {"step_num": 3}),
                    Ev("compute", 10_000, 900_000),
                    Ev("PjitFunction(train_step)", 20_000, 50_000),
                ],
            )
        ],
        {"process_id": 4242},
    )
    gemm = {"hlo_op": "cublas-gemm.1", "hlo_module": "jit_train_step", "tf_op": "jit(train_step)/dot_general"}
    gpu = Pl(
        2,
        "/device:GPU:0",
        [
            Ln(
                7,
                "Stream #7(Compute)",
                [
                    Ev(
                        "sm90_xmma_gemm_bf16",
                        100_000,
                        40_000,
                        {
                            **gemm,
                            "correlation_id": 101,
                            "kernel_details": (
                                "regs:168 static_shared:0 dynamic_shared:213504 grid:66,1,1 block:384,1,1"
                            ),
                        },
                    ),
                    Ev("splitk_reduce", 141_000, 4_000, {**gemm, "correlation_id": 102}),
                    Ev(
                        "loop_add_fusion",
                        150_000,
                        6_000,
                        {"hlo_op": "add.3", "hlo_module": "jit_train_step", "correlation_id": 103},
                    ),
                    Ev(
                        "MemcpyD2H",
                        160_000,
                        2_000,
                        {"memcpy_details": "kind_src:device kind_dst:pinned size:4096", "correlation_id": 104},
                    ),
                    Ev("stray_kernel", 170_000, 1_000, {"correlation_id": 105}),
                ],
            )
        ],
        {"compute_cap_major": 9, "compute_cap_minor": 0},
    )
    cupti = Pl(
        3,
        "/host:CUPTI",
        [
            Ln(
                11,
                "thread 11",
                [
                    Ev("cuLaunchKernelEx", 60_000 + 5_000 * i, 3_000, {"correlation_id": c})
                    for i, c in enumerate((101, 102, 103))
                ]
                + [
                    Ev("cuMemcpyDtoHAsync_v2", 80_000, 2_000, {"correlation_id": 104}),
                    Ev("cuLaunchKernel", 85_000, 2_000, {"correlation_id": 105}),
                ],
            )
        ],
    )
    env = Pl(4, "Task Environment", [], {"profile_start_time": t0})
    meta = Pl(
        5,
        "/host:metadata",
        [],
        {},
        {
            "jit_train_step(7)": hlo_proto(
                "jit_train_step", {"cublas-gemm.1": ("jit(train_step)/dot_general", "/home/u/train.py", "loss_fn", 26)}
            )
        },
    )
    return xspace([meta, host, gpu, cupti, env])


SRC = "jit(train_step)/dot_general (train.py:26 loss_fn)"  # from the HLO module in the metadata plane


def test_gpu_side_of_an_xspace(tmp_path, cli):
    f = tmp_path / "gpuhost.xplane.pb"
    f.write_bytes(_gpu_xspace())
    assert cli("import", f, "-o", tmp_path / "g.dlscope").code == 0
    data = ProfileData.open(tmp_path / "g.dlscope")
    t0 = 1_800_000_000_000_000_000
    # kernels with their launch shape, linked to their HLO op and to their launch
    ks = q(
        data.con,
        f"""SELECT k.name, k.start_ns - {t0}, k.grid_x, k.block_x, k.registers, k.shared_bytes, o.name,
                               o.source, a.name, k.step
                        FROM kernels k LEFT JOIN ops o ON o.external_id = k.external_id
                        LEFT JOIN api a ON a.correlation_id = k.correlation_id ORDER BY k.start_ns""",
    )
    assert ks == [
        ("sm90_xmma_gemm_bf16", 100_000, 66, 384, 168, 213504, "cublas-gemm.1", SRC, "cuLaunchKernelEx", 3),
        ("splitk_reduce", 141_000, None, None, None, None, "cublas-gemm.1", SRC, "cuLaunchKernelEx", 3),
        ("loop_add_fusion", 150_000, None, None, None, None, "add.3", None, "cuLaunchKernelEx", 3),
        ("stray_kernel", 170_000, None, None, None, None, None, None, "cuLaunchKernel", 3),
    ]
    # the GEMM's two kernels are one op call spanning both; the module run encloses both ops
    ops = q(
        data.con,
        f"""SELECT name, category, start_ns - {t0}, end_ns - start_ns, depth FROM ops
                         WHERE category IN ('hlo_op', 'xla_module') ORDER BY start_ns, depth""",
    )
    assert ops == [
        ("jit_train_step", "xla_module", 100_000, 56_000, 0),
        ("cublas-gemm.1", "hlo_op", 100_000, 45_000, 1),
        ("add.3", "hlo_op", 150_000, 6_000, 1),
    ]
    assert q(data.con, "SELECT copy_kind, src_kind, dst_kind, bytes FROM memcpy") == [
        ("DtoH", "device", "pinned", 4096)
    ]
    # op_sum: the GEMM op's GPU time is its two kernels; 1 us of kernel time has no op
    rows = {r["name"]: r for r in op_sum(data).table.to_pylist()}
    assert rows["cublas-gemm.1"]["self_gpu_ms"] == pytest.approx(0.044)
    assert rows["cublas-gemm.1"]["kernels"] == 2
    assert rows["jit_train_step"]["gpu_total_ms"] == pytest.approx(0.050)  # its two ops, not the copy
    assert open_profile(tmp_path / "g.dlscope").meta.devices[0]["compute_capability"] == "9.0"
    # the tensor-core report: the GEMM op is eligible and ran 40 of its 44 us on tensor cores
    tc = {r["op"]: r for r in tensor_core(data).table.to_pylist()}
    assert tc["cublas-gemm.1"]["eligible"] and tc["cublas-gemm.1"]["tc_gpu_ms"] == pytest.approx(0.040)
    assert not tc["add.3"]["eligible"] and tc["add.3"]["tc_gpu_ms"] == 0


def test_jax_json_beside_its_xspace_imports_the_xspace(tmp_path, cli, jax_profile):
    r = cli("import", _one(JAX_DIR, "*.trace.json.gz"), "-o", tmp_path / "j.dlscope")
    assert r.code == 0, r.err
    a, b = ProfileData.open(tmp_path / "j.dlscope"), ProfileData.open(jax_profile)
    sql = "SELECT category, count(*) FROM ops GROUP BY 1 ORDER BY 1"
    assert q(a.con, sql) == q(b.con, sql) and q(a.con, sql)


def test_stream_lines_are_told_from_derived_lines():
    from dlscope.importers.xplane_pb import Event, Line
    from dlscope.importers.xprof import stream_of

    kernel = Event("k", 0, 1, {"correlation_id": 5})
    assert stream_of(Line(3, "Stream #14(Compute)", [kernel])) == 14
    assert stream_of(Line(3, "XLA Ops", [kernel])) is None
    assert stream_of(Line(99, "Compute", [kernel])) == 99  # a stream under another name
    assert stream_of(Line(98, "Something", [Event("x", 0, 1, {})])) is None


TF1_DIR = DATA / "tf" / "cpu_session"


def test_tf1_session_runs_are_the_iterations(tmp_path, cli):
    assert cli("import", _one(TF1_DIR, "*.xplane.pb"), "-o", tmp_path / "s.dlscope").code == 0
    data = ProfileData.open(tmp_path / "s.dlscope")
    # the initializer's run, then the 4 training runs (make_tf1_trace.py)
    runs = q(data.con, "SELECT start_ns, end_ns FROM ops WHERE category = 'tf_session_run' ORDER BY start_ns")
    steps = q(data.con, "SELECT step, start_ns, end_ns, source FROM steps ORDER BY step")
    assert [(s, e) for _, s, e, _ in steps] == runs and len(runs) == 5
    assert {src for *_, src in steps} == {"session_run"}
    # each training run applies the gradient to both variables: two ApplyGradientDescent per run
    per_step = q(
        data.con,
        """SELECT step, count(*) FILTER (WHERE name LIKE '%:ResourceApplyGradientDescent'
                                                             OR name LIKE '%:ApplyGradientDescent'),
                                     count(*) FILTER (WHERE name LIKE '%:MatMul')
                              FROM ops WHERE category = 'tf_op' AND step IS NOT NULL GROUP BY 1 ORDER BY 1""",
    )
    assert [r[1] for r in per_step] == [0, 2, 2, 2, 2]
    assert all(r[2] >= 4 for r in per_step[1:])  # 2 forward and at least 2 backward matmuls
    assert q(data.con, "SELECT count(*) FROM phases WHERE name IN ('SessionRun', 'ExecutorDoneCallback')") == [(0,)]
