"""`dlscope profile` on a JAX program: the JAX layer (jax.profiler) records its ops, steps and
phases, on dlscope's clock. Needs a Python with jax: this interpreter, or the one named by
DLSCOPE_TEST_JAX_PYTHON (jax on the CPU is enough)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.store.reader import open_profile

from .conftest import REPO, q, run_dlscope

PROGRAM = REPO / "tests" / "programs" / "jax_mlp.py"


def _jax_python() -> str:
    for py in (os.environ.get("DLSCOPE_TEST_JAX_PYTHON"), sys.executable):
        if py and subprocess.run([py, "-c", "import jax"], capture_output=True).returncode == 0:
            return py
    pytest.skip("no Python with jax here (set DLSCOPE_TEST_JAX_PYTHON)")


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory) -> Path:
    py = _jax_python()
    out = tmp_path_factory.mktemp("jaxrun") / "jax.dlscope"
    r = run_dlscope("profile", "--quiet", "-o", out, "--", py, PROGRAM, timeout=300)
    assert r.returncode == 0, r.stderr
    return out


def test_jax_layer_records_steps_phases_and_ops(jax_run):
    meta = open_profile(jax_run).meta
    assert meta.collectors["jax"].status == "ok"
    assert "jax.profiler" in meta.collectors["cupti"].reason  # CUPTI is left to JAX's own profiler
    data = ProfileData.open(jax_run)
    steps = q(data.con, "SELECT step, warmup, source FROM steps ORDER BY step")
    assert steps == [(i, i == 0, "profiler_step") for i in range(6)]
    assert dict(q(data.con, "SELECT name, count(*) FROM phases WHERE name IN ('data', 'compute') GROUP BY 1")) == {
        "data": 6,
        "compute": 6,
    }
    # every step's train_step call ran the same HLO ops
    per_step = q(
        data.con,
        """SELECT step, count(*) FROM ops WHERE category = 'hlo_op' AND step IS NOT NULL
                              GROUP BY 1 ORDER BY 1""",
    )
    assert len(per_step) == 6 and len({n for _, n in per_step[1:]}) == 1 and per_step[1][1] >= 10


def test_jax_times_are_on_dlscope_clock(jax_run):
    data = ProfileData.open(jax_run)
    ((lo, hi),) = q(data.con, "SELECT start_ns, end_ns FROM phases WHERE name = 'loop'")
    first, last = q(data.con, "SELECT min(start_ns), max(end_ns) FROM steps")[0]
    assert lo <= first and last <= hi  # JAX's steps inside dlscope's own phase around the loop
    assert first - lo < 50_000_000
    # JAX's annotations sit on the same OS thread as dlscope's phase (the profiler's own thread
    # ids are mapped back)
    assert q(data.con, "SELECT DISTINCT tid FROM phases WHERE name IN ('loop', 'compute', 'data')") == q(
        data.con, "SELECT DISTINCT tid FROM steps"
    )


def test_jax_ops_point_at_the_program_lines(jax_run):
    lines = PROGRAM.read_text().splitlines()
    data = ProfileData.open(jax_run)
    sources = [
        s for (s,) in q(data.con, "SELECT DISTINCT source FROM ops WHERE source LIKE 'jit(train_step)%jax_mlp.py:%'")
    ]
    assert len(sources) >= 5
    for src in sources:
        line = int(re.search(r"jax_mlp\.py:(\d+)", src).group(1))
        assert any(tok in lines[line - 1] for tok in ("@", "relu", "mean", "0.01")), (src, lines[line - 1])


def test_jax_layer_traces_a_window_and_times_every_step(tmp_path):
    py = _jax_python()
    out = tmp_path / "long.dlscope"
    r = run_dlscope("profile", "--quiet", "-o", out, "--", py, PROGRAM, "12", timeout=300)
    assert r.returncode == 0, r.stderr
    data = ProfileData.open(out)
    # default mode: the warm-up step and 5 more are traced, the other 6 only timed
    assert q(data.con, "SELECT step, warmup, traced FROM steps ORDER BY step") == [
        (i, i == 0, i <= 5) for i in range(12)
    ]
    assert q(data.con, "SELECT DISTINCT step FROM ops WHERE category = 'hlo_op' AND step IS NOT NULL ORDER BY 1") == [
        (i,) for i in range(6)
    ]
    # the program's own phases: only inside the traced window
    assert q(data.con, "SELECT count(*) FROM phases WHERE name = 'compute'") == [(6,)]


def test_jax_layer_off(tmp_path):
    py = _jax_python()
    out = tmp_path / "off.dlscope"
    r = run_dlscope("profile", "--quiet", "--jax", "off", "-o", out, "--", py, PROGRAM, "2", timeout=300)
    assert r.returncode == 0, r.stderr
    meta = open_profile(out).meta
    assert meta.collectors["jax"].status == "off"
    assert q(ProfileData.open(out).con, "SELECT count(*) FROM ops") == [(0,)]
