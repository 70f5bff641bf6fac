"""`dlscope profile` on a TensorFlow program: the TensorFlow layer (tf.profiler.experimental)
records its graph ops, steps and phases. Needs a Python with tensorflow: this interpreter, or the
one named by DLSCOPE_TEST_TF_PYTHON (tensorflow-cpu is enough)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.store.reader import open_profile

from .conftest import REPO, q, run_dlscope

PROGRAM = REPO / "tests" / "programs" / "tf_keras.py"


def _tf_python() -> str:
    for py in (os.environ.get("DLSCOPE_TEST_TF_PYTHON"), sys.executable):
        if py and subprocess.run([py, "-c", "import tensorflow"], capture_output=True).returncode == 0:
            return py
    pytest.skip("no Python with tensorflow here (set DLSCOPE_TEST_TF_PYTHON)")


@pytest.fixture(scope="module")
def tf_run(tmp_path_factory) -> Path:
    py = _tf_python()
    out = tmp_path_factory.mktemp("tfrun") / "tf.dlscope"
    r = run_dlscope("profile", "--quiet", "-o", out, "--", py, PROGRAM, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return out


def test_tf_layer_records_steps_phases_and_graph_ops(tf_run):
    meta = open_profile(tf_run).meta
    assert meta.collectors["tensorflow"].status == "ok"
    data = ProfileData.open(tf_run)
    assert q(data.con, "SELECT step, warmup FROM steps ORDER BY step") == [(i, i == 0) for i in range(5)]
    assert dict(q(data.con, "SELECT name, count(*) FROM phases WHERE name IN ('data', 'compute') GROUP BY 1")) == {
        "data": 5,
        "compute": 5,
    }
    # each step: two forward _FusedMatMul (one per Dense layer), three backward MatMul
    per_step = q(
        data.con,
        """SELECT step, count(*) FILTER (WHERE name LIKE '%:\\_FusedMatMul' ESCAPE '\\'),
                                     count(*) FILTER (WHERE name LIKE '%:MatMul')
                              FROM ops WHERE category = 'tf_op' AND step IS NOT NULL GROUP BY 1 ORDER BY 1""",
    )
    assert per_step == [(i, 2, 3) for i in range(5)]
