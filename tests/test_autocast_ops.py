"""Autocast's host cost (dlscope.analysis.core.autocast_ops): the constants against the measurement they
cite, and the profile's own operator counts against a count done here in plain Python."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlscope.analysis.core.autocast_ops import (
    ADDED_PER_CASTABLE,
    CASTABLE_RE,
    METADATA_OPS,
    TYPICAL_HOST_FACTOR,
    pass_ops,
)
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.host_classes import MODEL_RE

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "tests" / "data" / "advice_truth_hooks"


def test_the_constants_are_the_benchmarks_medians():
    """bench/autocast_host_cost.py counts every dispatched operator of four models outside the
    suite, plain and under autocast: its medians are the module's constants."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "autocast_host_cost.py"), "--count-ops"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["added_per_castable_median"] == pytest.approx(ADDED_PER_CASTABLE, abs=0.1)
    assert got["ratio_median"] == pytest.approx(TYPICAL_HOST_FACTOR, abs=0.03)
    for row in got["models"].values():  # what autocast adds is casts, nothing else
        assert set(row["added"]) == {"aten._to_copy"}


@pytest.mark.parametrize("model", ["mlp", "gpt", "cnn"])
def test_pass_ops_count_the_leaf_operators_of_forward_and_backward(model):
    """The suite's H100 profiles: operators without children, not metadata ones, that start inside
    a forward or backward phase of the main process, per traced step, counted here row by row."""
    data = ProfileData.open(HOOKS / f"{model}_baseline_default.dlscope")
    got = pass_ops(data)
    assert got is not None
    ops = data.con.execute("SELECT rank, op_id, parent_id, start_ns, name, pid FROM ops").fetchall()
    parents = {(r, p) for r, _, p, *_ in ops if p is not None}
    main = dict(data.con.execute("SELECT rank, pid FROM ops GROUP BY ALL ORDER BY count(*) DESC").fetchall()[:1])
    phases = [
        (r, s, e)
        for r, s, e, n, pid in data.con.execute(
            "SELECT rank, start_ns, end_ns, name, pid FROM phases WHERE kind = 'range'"
        ).fetchall()
        if re.search(MODEL_RE, n.lower()) and (pid is None or main.get(r) in (None, pid))
    ]
    metadata = {f"aten::{m}" for m in METADATA_OPS}
    leaves = {
        (r, s, n)
        for r, i, _, s, n, _ in ops
        if (r, i) not in parents and n not in metadata and any(pr == r and a <= s < b for pr, a, b in phases)
    }
    steps = data.con.execute("SELECT count(*) FROM detail_steps").fetchone()[0]
    assert got.ops == pytest.approx(len(leaves) / steps)
    assert got.castable == pytest.approx(sum(1 for *_, n in leaves if re.match(CASTABLE_RE, n)) / steps)
    assert 1.0 < got.host_factor < 1.0 + ADDED_PER_CASTABLE  # some, not all, operators are matrix math


def test_pass_ops_leaves_the_connection_free_for_the_next_query():
    """DuckDB 2 keeps a result read with fetchone open and refuses the connection's next ``sql()``:
    the fuzzer found ``dlscope report`` ending in an internal error that way, after the
    amp_not_enabled finding's what-if counted the passes' operators."""
    data = ProfileData.open(HOOKS / "mlp_baseline_default.dlscope")
    assert pass_ops(data) is not None
    assert data.table("SELECT 42 AS x").column("x").to_pylist() == [42]
