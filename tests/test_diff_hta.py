"""`dlscope diff`'s kernel and op tables against Holistic Trace Analysis's TraceDiff on HTA's own
trace pairs: per name, the counts and total durations of both sides (the reference is HTA 0.5.0's
``compare_traces`` over every iteration, made by tests/data/hta/make_trace_diff_reference.py)."""

from __future__ import annotations

import json

import pytest

from dlscope.analysis.compare.diff import compare
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.gpu_work import gpu_step_count
from dlscope.importers.run import import_files

from .conftest import CORPUS, DATA, need_file

REFERENCE = json.loads((DATA / "hta" / "trace_diff.json").read_text())


@pytest.mark.parametrize("pair", sorted(REFERENCE))
def test_kernels_and_ops_agree_with_hta_trace_diff(pair, tmp_path):
    ref = REFERENCE[pair]
    a_dir = need_file(CORPUS / pair / ref["control"])
    b_dir = need_file(CORPUS / pair / ref["test"])
    a = ProfileData.open(import_files([a_dir], tmp_path / "a.dlscope"))
    b = ProfileData.open(import_files([b_dir], tmp_path / "b.dlscope"))
    d = compare(a, b)
    na, nb = gpu_step_count(a), gpu_step_count(b)
    assert na == len(ref["iterations"]["control"]) and nb == len(ref["iterations"]["test"])

    gpu = {r["name"]: r for r in ref["gpu"]}
    kernels = [c for c in d.kernels if not c.name.startswith(("Memcpy", "Memset"))]
    for side, n, val, cnt in (("control", na, "a", "count_a"), ("test", nb, "b", "count_b")):
        ours = {c.name: c for c in kernels if getattr(c, val) is not None}
        theirs = {name for name, r in gpu.items() if r[f"{side}_counts"] > 0}
        assert set(ours) == theirs, side
        for name, c in ours.items():
            r = gpu[name]
            assert getattr(c, cnt) * n == pytest.approx(r[f"{side}_counts"]), name
            assert getattr(c, val) * n * 1e3 == pytest.approx(r[f"{side}_total_duration"], rel=1e-6, abs=1e-3), name
    # new / vanished as HTA's counts say
    assert {c.name for c in kernels if c.status == "new"} == {
        n for n, r in gpu.items() if r["control_counts"] == 0 and r["test_counts"] > 0
    }
    assert {c.name for c in kernels if c.status == "vanished"} == {
        n for n, r in gpu.items() if r["test_counts"] == 0 and r["control_counts"] > 0
    }

    # ops: HTA's CPU side holds every CPU event (annotations, runtime calls too); every framework op
    # dlscope lists is among them, with the same number of calls on each side
    cpu = {r["name"]: r for r in ref["cpu"]}
    assert d.ops
    for c in d.ops:
        r = cpu[c.name]
        assert (c.count_a or 0) * na == pytest.approx(r["control_counts"]), c.name
        assert (c.count_b or 0) * nb == pytest.approx(r["test_counts"]), c.name
