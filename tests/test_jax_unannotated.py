"""Issue 40 end to end: bench/programs/jax_unannotated.py (flax + optax, no step annotation, no
dlscope) under `dlscope profile` gets its steps from the runs of its jit step, and their median is the
program's own timer's over the same steps. Needs a Python with jax, flax and optax: this interpreter or
DLSCOPE_TEST_JAX_PYTHON (on the CPU is enough).

Tolerance: the program times iteration i from the end of iteration i - 1 to the return of
``block_until_ready`` after call i; the derived step runs from run i - 1's completion to run i's. Both
tile the same loop, so a step differs only by how much later than the run's completion the host
returned, at its two ends (tens of microseconds on the CPU, on 4-10 ms steps): the medians agree
within the acceptance's 5% however loaded the machine is, since both clocks time the same steps.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from dlscope.analysis.core.context import ProfileData

from .conftest import REPO, q, run_dlscope

PROGRAM = REPO / "bench" / "programs" / "jax_unannotated.py"
CHECK = REPO / "bench" / "jax_steps_check.py"
STEPS, SKIP = 20, 3  # the first call compiles (a second or more on the CPU)
TOLERANCE = 0.05  # see the module's docstring


def _flax_python() -> str:
    for py in (os.environ.get("DLSCOPE_TEST_JAX_PYTHON"), sys.executable):
        if py and subprocess.run([py, "-c", "import jax, flax, optax"], capture_output=True).returncode == 0:
            return py
    pytest.skip("no Python with jax, flax and optax here (set DLSCOPE_TEST_JAX_PYTHON)")


def test_unannotated_flax_loop_gets_its_steps_at_the_programs_own_times(tmp_path):
    py = _flax_python()
    out, times = tmp_path / "jax.dlscope", tmp_path / "times.json"
    cmd = [py, PROGRAM, "--small", "--steps", str(STEPS), "--times-out", times]
    r = run_dlscope("profile", "--quiet", "-o", out, "--", *cmd, timeout=300)
    assert r.returncode == 0, r.stderr
    data = ProfileData.open(out)
    rows = q(data.con, "SELECT step, source, (end_ns - start_ns) / 1e6 FROM steps ORDER BY step")
    # every call of the jit step is a step: no annotation, so the whole run was traced
    assert [(s, src) for s, src, _ in rows] == [(i, "jit_executable") for i in range(STEPS)]
    own = json.loads(times.read_text())["steps_ms"]
    derived = statistics.median(ms for _, _, ms in rows[SKIP:])
    timer = statistics.median(own[SKIP:])
    assert abs(derived / timer - 1) < TOLERANCE, (derived, timer)
    # bench/jax_steps_check.py, the GPU part's check, says the same
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run(
        [sys.executable, CHECK, out, times, "--skip", str(SKIP)], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    check = json.loads(res.stdout)
    assert check["within_5pct"] == "yes" and check["sources"] == ["jit_executable"]
    assert check["profile_median_ms"] == pytest.approx(derived, abs=1e-3)
