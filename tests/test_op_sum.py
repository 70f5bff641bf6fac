"""op_sum against a plain-Python reading of the Kineto JSON: calls, CPU self/total time from the
nesting of ops on each thread, GPU time linked by External id and summed up the nesting."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from dlscope.analysis.reports import op_sum

from . import kineto_reference as ref
from .report_helpers import US, fixture_path, make_profile, open_fixture

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _dur(e) -> int:
    return int(Decimal(e["dur"]) * 1000)


def iterations(doc) -> list[tuple[int, int, int]]:
    """ProfilerStep#N spans; else, as the importer documents, spans ending at each optimizer step,
    the first starting with the trace's first op, annotation or runtime call."""
    steps = ref.profiler_steps(doc)
    if steps:
        return steps
    ends = sorted(
        ref.ns(doc, e["ts"]) + _dur(e)
        for e in ref.events(doc, "user_annotation")
        if e["name"].startswith("Optimizer.step#")
    )
    first = min(
        ref.ns(doc, e["ts"])
        for c in ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
        for e in ref.events(doc, c)
    )
    return [(i, s, t) for i, (s, t) in enumerate(zip([first] + ends[:-1], ends))]


def expected(name: str) -> dict[str, dict]:
    doc = ref.load(fixture_path(name))
    steps = iterations(doc)
    ops = [e for e in ref.events(doc, "cpu_op") if any(s <= ref.ns(doc, e["ts"]) < t for _, s, t in steps)]
    own: dict[int, list[int]] = defaultdict(lambda: [0, 0])  # External id -> [ns, kernels]
    for cat in GPU_CATS:
        for e in ref.events(doc, cat):
            eid = e["args"].get("External id")
            own[eid][0] += _dur(e)
            own[eid][1] += cat == "kernel"
    # nesting per thread: a stack of open ops (sorted by start, longer first)
    self_ns, total_gpu = {}, {}
    by_thread = defaultdict(list)
    for e in ref.events(doc, "cpu_op"):
        by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (ref.ns(doc, e["ts"]), -_dur(e)))
        stack: list[dict] = []
        for e in evs:
            s = ref.ns(doc, e["ts"])
            while stack and ref.ns(doc, stack[-1]["ts"]) + _dur(stack[-1]) <= s:
                stack.pop()
            eid = e["args"]["External id"]
            self_ns[eid] = self_ns.get(eid, 0) + _dur(e)
            total_gpu[eid] = total_gpu.get(eid, 0) + own[eid][0]
            if stack:
                self_ns[stack[-1]["args"]["External id"]] -= _dur(e)
            for anc in stack:  # every open op is an ancestor
                total_gpu[anc["args"]["External id"]] += own[eid][0]
            stack.append(e)
    out: dict[str, dict] = {}
    for e in ops:
        eid = e["args"]["External id"]
        r = out.setdefault(e["name"], dict(calls=0, total=0, self=0, own=0, gpu_total=0, kernels=0, shapes=Counter()))
        r["calls"] += 1
        r["total"] += _dur(e)
        r["self"] += self_ns[eid]
        r["own"] += own[eid][0]
        r["kernels"] += own[eid][1]
        r["gpu_total"] += total_gpu[eid]
        dims = e["args"].get("Input Dims")
        dims = json.dumps(dims, separators=(",", ":")) if isinstance(dims, list) else (dims or "").replace(" ", "")
        if dims and dims != "[]":
            r["shapes"][dims] += 1
    return out


@pytest.mark.parametrize("name", ["h100_resnet50_phases", "h100_gpt6_bf16"])
def test_op_sum_equals_plain_python(name, tmp_path_factory):
    want = expected(name)
    r = op_sum.compute(open_fixture(name, tmp_path_factory))
    got = {row["name"]: row for row in r.table.to_pylist()}
    assert set(got) == set(want)
    for op, w in want.items():
        g = got[op]
        assert g["calls"] == w["calls"], op
        assert g["cpu_total_ms"] == pytest.approx(w["total"] / 1e6, abs=1e-9), op
        assert g["self_cpu_ms"] == pytest.approx(w["self"] / 1e6, abs=1e-9), op
        assert g["self_gpu_ms"] == pytest.approx(w["own"] / 1e6, abs=1e-9), op
        assert g["gpu_total_ms"] == pytest.approx(w["gpu_total"] / 1e6, abs=1e-9), op
        assert g["kernels"] == w["kernels"], op
        top = w["shapes"].most_common(2)
        if top and (len(top) == 1 or top[0][1] > top[1][1]):  # a unique most common shape
            assert g["input_shapes"] == top[0][0], op
    # the shares are of all self time
    assert sum(row["self_cpu_pct"] for row in got.values()) == pytest.approx(100)
    assert sum(row["self_gpu_pct"] for row in got.values()) == pytest.approx(100)


def test_gpu_time_climbs_the_nesting(tmp_path):
    # linear > addmm (launches a kernel) ; linear also launches one itself
    ops = [
        dict(pid=1, tid=1, start_ns=0, end_ns=100 * US, name="aten::linear", op_id=0, external_id=10),
        dict(pid=1, tid=1, start_ns=10 * US, end_ns=50 * US, name="aten::addmm", op_id=1, external_id=11),
        dict(pid=1, tid=2, start_ns=0, end_ns=5 * US, name="aten::empty", op_id=2, external_id=12),
    ]
    api = [
        dict(pid=1, tid=1, start_ns=20 * US, end_ns=21 * US, name="cudaLaunchKernel", correlation_id=1, external_id=11),
        dict(pid=1, tid=1, start_ns=60 * US, end_ns=61 * US, name="cudaLaunchKernel", correlation_id=2, external_id=10),
    ]
    k = [
        dict(device=0, stream=7, start_ns=30 * US, end_ns=70 * US, name="gemm", correlation_id=1, external_id=11),
        dict(device=0, stream=7, start_ns=70 * US, end_ns=75 * US, name="bias", correlation_id=2, external_id=10),
    ]
    m = [
        dict(
            device=0,
            stream=7,
            start_ns=80 * US,
            end_ns=82 * US,
            bytes=8,
            copy_kind="DtoD",
            correlation_id=3,
            external_id=11,
        )
    ]
    rows = {
        r["name"]: r
        for r in op_sum.compute(make_profile(tmp_path, ops=ops, api=api, kernels=k, memcpy=m)).table.to_pylist()
    }
    assert rows["aten::addmm"]["self_gpu_ms"] == pytest.approx(0.042) and rows["aten::addmm"]["kernels"] == 1
    assert rows["aten::linear"]["self_gpu_ms"] == pytest.approx(0.005)
    assert rows["aten::linear"]["gpu_total_ms"] == pytest.approx(0.047)
    assert rows["aten::linear"]["self_cpu_ms"] == pytest.approx(0.060)
    assert rows["aten::empty"]["gpu_total_ms"] == 0
    assert "input_shapes" not in rows["aten::linear"]  # no shapes recorded: no column


def test_cpu_only_profile_has_no_gpu_columns(tmp_path):
    ops = [dict(pid=1, tid=1, start_ns=0, end_ns=10 * US, name="aten::add", op_id=0)]
    r = op_sum.compute(make_profile(tmp_path, ops=ops))
    assert r.table.column_names[:3] == ["name", "calls", "self_cpu_ms"] and "self_gpu_ms" not in r.table.column_names
    assert "no GPU activity in the profile" in r.notes
