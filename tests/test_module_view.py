"""The module view (issue 42): module calls recorded in the traced steps of a real PyTorch program
(a 2-block GPT-style transformer and a small CNN, trained on CPU), checked against the model's own
``named_modules()`` and against the ops of the same profile attributed independently in plain
Python (forward by the innermost call holding an op, backward by the forward op's sequence
number)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.innermost import innermost
from dlscope.analysis.measures.modules import block_patterns, module_view
from dlscope.capture.torch import DEFAULT_DETAIL_STEPS

from .conftest import q, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"
STEPS = 9  # warm-up, 5 traced, 3 untraced
CONTAINERS = ("ModuleDict", "ModuleList")  # never called: no call, no path
NODE = "autograd::engine::evaluate_function:"


def _profile(tmp_path_factory: pytest.TempPathFactory, kind: str) -> tuple[ProfileData, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp(kind)
    out, names = tmp / f"{kind}.dlscope", tmp / "names.json"
    r = run_dlscope(
        "profile", "-o", out, "--quiet", "--", sys.executable, PROGRAMS / "module_models.py", kind, str(STEPS), names
    )
    assert r.returncode == 0, r.stderr
    return ProfileData.open(out), json.loads(names.read_text())


@pytest.fixture(scope="module")
def gpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProfileData, dict[str, Any]]:
    return _profile(tmp_path_factory, "gpt")


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProfileData, dict[str, Any]]:
    return _profile(tmp_path_factory, "cnn")


def _called(names: dict[str, str]) -> dict[str, str]:
    return {n: t for n, t in names.items() if n and t not in CONTAINERS}


def test_calls_only_in_traced_steps_after_warmup_and_hooks_removed(gpt):
    data, info = gpt
    steps = dict(q(data.con, "SELECT step, traced AND NOT warmup FROM steps"))
    with_calls = {s for (s,) in q(data.con, "SELECT DISTINCT step FROM module_calls")}
    assert with_calls and all(steps[s] for s in with_calls)
    # every step of the traced window after the warm-up (step 6 is flagged traced too: it paid for the write)
    assert with_calls == set(range(1, 1 + DEFAULT_DETAIL_STEPS))
    assert info["global_hooks_after"] == 0


def test_gpt_tree_matches_named_modules(gpt):
    data, info = gpt
    rows = q(data.con, "SELECT DISTINCT name, type FROM module_calls")
    root = {n for n, _ in rows if "." not in n}
    assert root == {"GPT"}
    got = {n.split(".", 1)[1]: t for n, t in rows if "." in n}
    assert got == _called(info["names"])
    # every module called once per step: 5 steps
    counts = q(data.con, "SELECT count(*) FROM module_calls GROUP BY name")
    assert {c for (c,) in counts} == {5}
    # a call nests in its parent's (same thread, depth one more)
    calls = q(data.con, "SELECT name, depth, start_ns, end_ns, step FROM module_calls ORDER BY start_ns")
    for name, depth, s, e, step in calls:
        if depth == 0:
            continue
        parent = name.rsplit(".", 1)[0]
        while parent not in {c[0] for c in calls}:
            parent = parent.rsplit(".", 1)[0]
        holders = [c for c in calls if c[0] == parent and c[4] == step and c[2] <= s and e <= c[3]]
        assert len(holders) == 1, name


def _attributor(data: ProfileData) -> Any:
    """Plain Python: a function (thread, time) -> (direction, exact path or None) for a point,
    or None where it is in neither the forward, the backward nor the optimizer."""
    calls = q(data.con, "SELECT tid, start_ns, end_ns, name, depth FROM module_calls")
    ops = q(data.con, "SELECT tid, start_ns, end_ns, name, sequence_nr, depth, step FROM ops")
    nodes = [o for o in ops if o[3].startswith(NODE)]
    phases = q(data.con, "SELECT tid, start_ns, end_ns, name FROM phases WHERE source = 'hook'")

    def inside(intervals: list[Any], tid: int, t: int) -> Any:
        hold = [c for c in intervals if c[0] == tid and c[1] <= t <= c[2]]
        return max(hold, key=lambda c: c[1]) if hold else None

    def recompute(n: Any, c: Any) -> bool:  # a module call inside a backward node: a checkpoint's recompute
        return n is not None and c is not None and c[1] >= n[1]

    seq_path: dict[int, tuple[int, str]] = {}
    for o in ops:
        if o[4] is None or o[3].startswith(NODE):
            continue
        n, c = inside(nodes, o[0], o[1]), inside(calls, o[0], o[1])
        if c is None or (n is not None and not recompute(n, c)):
            continue
        if o[4] not in seq_path or o[5] < seq_path[o[4]][0]:
            seq_path[o[4]] = (o[5], c[3])

    def attribute(tid: int, t: int) -> tuple[str, str | None] | None:
        n = inside(nodes, tid, t)
        if n is not None:
            c = inside(calls, tid, t)
            return "backward", c[3] if recompute(n, c) else seq_path.get(n[4], (0, None))[1]
        c = inside(calls, tid, t)
        if c is not None:
            return "forward", c[3]
        ph = [p for p in phases if p[1] <= t <= p[2]]
        if any(p[3] == "optimizer" and p[0] == tid for p in ph):
            return "optimizer", None
        direction = next((p[3] for p in ph if p[3] in ("forward", "backward")), None)
        return (direction, None) if direction else None

    return attribute


def _ops_by_module(data: ProfileData) -> tuple[dict[str, dict[str, float]], float, float]:
    """Plain Python: the selected steps' op time (each op's duration less its children's) per exact
    path (self: innermost call) and direction, and the forward+backward total and the part outside
    modules."""
    # the selected steps that hold module calls (the view measures those only)
    sel_steps = {s for (s,) in q(data.con, "SELECT step FROM sel_steps")}
    sel_steps &= {s for (s,) in q(data.con, "SELECT DISTINCT step FROM module_calls")}
    attribute = _attributor(data)
    out: dict[str, dict[str, float]] = {}
    total = outside = 0.0
    ops = q(data.con, "SELECT op_id, parent_id, tid, start_ns, end_ns, step FROM ops")
    children: dict[int, int] = {}
    for _, parent, _, s, e, _ in ops:
        if parent is not None:
            children[parent] = children.get(parent, 0) + (e - s)
    for op_id, _, tid, s, e, step in ops:
        if step not in sel_steps:
            continue
        got = attribute(tid, s)
        if got is None:
            continue
        direction, path = got
        dur = e - s - children.get(op_id, 0)
        if direction == "optimizer":
            out.setdefault("(optimizer)", {}).setdefault("optimizer", 0.0)
            out["(optimizer)"]["optimizer"] += dur
            continue
        total += dur
        if path is None:
            outside += dur
            continue
        out.setdefault(path, {}).setdefault(direction, 0.0)
        out[path][direction] += dur
    return out, total, outside


def _check_against_plain_python(data: ProfileData) -> None:
    view = module_view(data)
    assert view is not None
    by_path, total, outside = _ops_by_module(data)
    steps = view.steps
    assert steps == 5
    paths = sorted({n for (n,) in q(data.con, "SELECT DISTINCT name FROM module_calls")})
    types = dict(q(data.con, "SELECT DISTINCT name, type FROM module_calls"))
    pats = dict(zip(paths, block_patterns(tuple(paths), tuple(types[p] for p in paths))))
    rows = {r.module: r for r in view.rows}
    calls = q(data.con, "SELECT name, tid, start_ns, end_ns FROM module_calls")
    nodes = q(data.con, f"SELECT tid, start_ns, end_ns FROM ops WHERE name LIKE '{NODE}%'")

    def in_node(tid: int, t: int) -> bool:
        return any(n[0] == tid and n[1] <= t <= n[2] for n in nodes)

    for pat, row in rows.items():
        if row.part != "module":
            continue
        members = [p for p in paths if pats[p] == pat]
        assert row.instances == len(members)
        subtree = [p for p in by_path if any(p == m or p.startswith(m + ".") for m in members)]
        for direction, got in (("forward", row.fwd_ops_ms), ("backward", row.bwd_host_ms)):
            want = sum(by_path[p].get(direction, 0.0) for p in subtree) / 1e6 / steps
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (pat, direction)
        # host time forward: the calls' own durations, but a recompute's inside a backward node; the
        # ops inside fit in them
        calls_ms = sum(e - s for n, tid, s, e in calls if n in members and not in_node(tid, s)) / 1e6
        assert row.fwd_host_ms == pytest.approx(calls_ms / steps, rel=1e-9)
        assert row.fwd_ops_ms <= row.fwd_host_ms * 1.001
    assert view.ops_coverage_pct == pytest.approx(100 * (total - outside) / total, rel=1e-9)
    assert view.ops_coverage_pct >= 95
    opt = rows["(optimizer)"]
    assert opt.ops_ms > 0
    assert opt.ops_ms == pytest.approx(by_path["(optimizer)"]["optimizer"] / 1e6 / steps, rel=1e-9)


def test_gpt_ops_attributed_as_plain_python_does(gpt):
    data, _ = gpt
    _check_against_plain_python(data)
    rows = {r.module: r for r in module_view(data).rows}
    # the two blocks are one row; the backward of the blocks holds time (the sequence numbers link)
    assert rows["GPT.transformer.h.*"].instances == 2
    assert rows["GPT.transformer.h.*.mlp"].bwd_host_ms > 0
    assert rows["GPT.transformer.h.*.mlp.0"].type == "Linear"  # a Sequential's indexes name different modules
    # the root holds its children: its forward ops are at least the sum of its children's
    kids = [r for r in rows.values() if r.part == "module" and r.depth == 1]
    assert rows["GPT"].fwd_ops_ms >= sum(r.fwd_ops_ms for r in kids) * 0.999


def test_cnn_tree_and_coverage(cnn):
    data, info = cnn
    rows = q(data.con, "SELECT DISTINCT name, type FROM module_calls")
    roots = {n: t for n, t in rows if "." not in n}
    assert roots == {"Sequential": "Sequential", "CrossEntropyLoss": "CrossEntropyLoss"}
    got = {n.split(".", 1)[1]: t for n, t in rows if n.startswith("Sequential.")}
    assert got == _called(info["names"])
    _check_against_plain_python(data)


def test_report_runs_and_renders(gpt):
    data, _ = gpt
    result = REPORTS["modules"].compute(data)
    names = result.table.column("module").to_pylist()
    assert names[0] == "GPT" and "(optimizer)" in names
    assert "gpu_ms" not in result.table.column_names  # no GPU on this profile
    assert any("95" in n or "%" in n for n in result.notes)


def test_innermost_matches_brute_force():
    rng = np.random.default_rng(3)
    # nested intervals: random trees on two groups
    groups, starts, ends = [], [], []
    for g in (5, 9):
        t = 0
        stack: list[tuple[int, int]] = []
        for _ in range(200):
            if stack and rng.random() < 0.45:
                s = stack.pop()
                t += int(rng.integers(1, 5))
                groups.append(g)
                starts.append(s[0])
                ends.append(t)
            else:
                t += int(rng.integers(1, 5))
                stack.append((t, 0))
        while stack:
            t += 1
            groups.append(g)
            starts.append(stack.pop()[0])
            ends.append(t)
    pg = rng.choice([5, 9, 7], 500)
    pt = rng.integers(0, max(ends) + 3, 500)
    got = innermost(np.array(groups), np.array(starts), np.array(ends), pg, pt)
    for i in range(500):
        hold = [j for j in range(len(starts)) if groups[j] == pg[i] and starts[j] <= pt[i] <= ends[j]]
        want = max(hold, key=lambda j: (starts[j], -ends[j])) if hold else -1
        assert got[i] == want, i


def test_block_patterns():
    paths = ("M", "M.h.0", "M.h.1", "M.h.0.attn", "M.h.1.attn", "M.seq.0", "M.seq.1", "M.seq.2")
    types = ("M", "Block", "Block", "Attn", "Attn", "Conv2d", "ReLU", "Conv2d")
    assert block_patterns(paths, types) == ["M", "M.h.*", "M.h.*", "M.h.*.attn", "M.h.*.attn"] + list(paths[5:])


def test_html_section_holds_the_view_and_escapes_names(gpt):
    from dataclasses import replace

    from dlscope.application.report import build_report
    from dlscope.render.html import render_report
    from dlscope.render.html.modules import modules_section

    data, _ = gpt
    model = build_report(data)
    assert model.modules is not None
    page = render_report(model)
    section = page[page.index('<h2 id="modules">') :]
    view = module_view(data)
    mlp = next(r for r in view.rows if r.module == "GPT.transformer.h.*.mlp")
    assert "GPT.transformer.h.*.mlp" in section and f"{mlp.fwd_host_ms:,.3f}" in section
    assert f"{view.ops_coverage_pct:.1f}%" in section
    hostile = replace(view, rows=(replace(view.rows[0], module="<script>x</script>", type="<b>"),))
    html = modules_section(hostile)
    assert "<script>" not in html and "&lt;script&gt;" in html and "<b>" not in html
    assert "No module calls" in modules_section(None)


# ---- kernels: launches placed at the real ops of the CPU profile ---------------------------------
SGEMM = "ampere_sgemm_128x64_tn"  # fp32 on CUDA cores (analysis.core.math_kernels)
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"


def _with_kernels(data: ProfileData, out: Path) -> tuple[ProfileData, list[tuple[int, int, int, str]]]:
    """The profile again, with one kernel launched at the start of every matrix-math op (forward
    and backward) and every outermost op of the optimizer: (tid, launch time, duration, name) each."""
    import pyarrow as pa

    from dlscope.store.build import ProfileBuilder
    from dlscope.store.db import query_arrow
    from dlscope.store.meta import Meta

    opt = q(data.con, "SELECT tid, start_ns, end_ns FROM phases WHERE source = 'hook' AND name = 'optimizer'")
    ops = q(data.con, "SELECT pid, tid, start_ns, end_ns, name, depth FROM ops ORDER BY start_ns")
    launches = []
    for pid, tid, s, _e, name, depth in ops:
        in_opt = any(t == tid and a <= s <= b for t, a, b in opt)
        if name in ("aten::addmm", "aten::mm", "aten::bmm"):
            launches.append((pid, tid, s + 1, 1000 + (s % 7) * 100, SGEMM))
        elif in_opt and depth == 0:
            launches.append((pid, tid, s + 1, 500, ELEMENTWISE))
    n = len(launches)
    builder = ProfileBuilder()
    for table in ("phases", "steps", "ops", "module_calls"):  # the decoded views: the builder wants text
        builder.add(table, query_arrow(data.con, f"SELECT * FROM {table}"))
    corr = pa.array(range(1, n + 1), pa.int64())
    builder.add(
        "api",
        pa.table(
            {
                "rank": pa.array([0] * n, pa.int32()),
                "pid": pa.array([x[0] for x in launches], pa.int64()),
                "tid": pa.array([x[1] for x in launches], pa.int64()),
                "start_ns": pa.array([x[2] for x in launches], pa.int64()),
                "end_ns": pa.array([x[2] + 5 for x in launches], pa.int64()),
                "name": ["cudaLaunchKernel"] * n,
                "correlation_id": corr,
                "kind": ["runtime"] * n,
            }
        ),
    )
    builder.add(
        "kernels",
        pa.table(
            {
                "rank": pa.array([0] * n, pa.int32()),
                "device": pa.array([0] * n, pa.int32()),
                "stream": pa.array([7] * n, pa.int64()),
                "start_ns": pa.array([x[2] + 10 for x in launches], pa.int64()),
                "end_ns": pa.array([x[2] + 10 + x[3] for x in launches], pa.int64()),
                "name": [x[4] for x in launches],
                "correlation_id": corr,
                "pid": pa.array([x[0] for x in launches], pa.int64()),
            }
        ),
    )
    builder.write(out, Meta.from_dict(data.meta.to_dict()))
    return ProfileData.open(out), [(x[1], x[2], x[3], x[4]) for x in launches]


def test_kernels_attributed_by_their_launch(gpt, tmp_path):
    from dlscope.advice.module_share import where_it_sits
    from dlscope.analysis.measures.modules import math_split

    data, _ = gpt
    kdata, launches = _with_kernels(data, tmp_path / "k.dlscope")
    attribute = _attributor(kdata)
    sel = q(kdata.con, "SELECT start_ns, end_ns FROM sel_steps WHERE step IN (SELECT step FROM module_calls)")
    paths = sorted({n for (n,) in q(kdata.con, "SELECT DISTINCT name FROM module_calls")})
    types = dict(q(kdata.con, "SELECT DISTINCT name, type FROM module_calls"))
    pats = dict(zip(paths, block_patterns(tuple(paths), tuple(types[p] for p in paths))))
    by_pat: dict[str, float] = {}
    fwd_bwd = in_modules = optimizer = sgemm = 0.0
    for tid, t, dur, name in launches:
        if not any(a <= t < b for a, b in sel):
            continue
        got = attribute(tid, t)
        if got is None:
            continue
        direction, path = got
        if direction == "optimizer":
            optimizer += dur
            continue
        fwd_bwd += dur
        if path is None:
            continue
        in_modules += dur
        if name == SGEMM:
            sgemm += dur
            for m in paths:  # every module whose subtree holds it
                if path == m or path.startswith(m + "."):
                    by_pat[pats[m]] = by_pat.get(pats[m], 0.0) + dur
    view = module_view(kdata)
    steps = view.steps
    assert fwd_bwd > 0 and optimizer > 0
    assert view.gpu_coverage_pct == pytest.approx(100 * in_modules / fwd_bwd, rel=1e-9)
    assert view.gpu_coverage_pct >= 95
    rows = {r.module: r for r in view.rows}
    assert rows["(optimizer)"].gpu_ms == pytest.approx(optimizer / 1e6 / steps, rel=1e-9)
    for pat, ns in by_pat.items():  # only SGEMMs land in modules here
        assert rows[pat].gpu_ms == pytest.approx(ns / 1e6 / steps, rel=1e-9), pat
    assert rows["GPT.transformer.h.*.mlp"].bwd_gpu_ms > 0  # the backward's launches reached the modules
    split = math_split(kdata, ("fp32",))
    assert split is not None
    shares = {s.module: s.pct for s in split.shares}
    for pat, ns in by_pat.items():
        assert shares[pat] == pytest.approx(100 * ns / sgemm, rel=1e-9)
    phrase = where_it_sits(split)
    deepest = max((p for p, v in shares.items() if "." in p and v >= 50), key=lambda p: (p.count("."), shares[p]))
    assert phrase == f"{shares[deepest]:.0f}% of it in `{deepest}`"


def test_recorder_names_calls_by_caller_and_removes_its_hooks():
    import time

    import torch
    from torch import nn
    from torch.nn.modules import module as nn_module

    from dlscope.capture.module_calls import ModuleCallRecorder

    shared = nn.Linear(4, 4)

    class Two(nn.Module):  # calls a grandchild directly, and a module it shares with another parent
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 4))])
            self.shared = shared

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared(self.blocks[1][0](self.blocks[0](x)))

    before = len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)
    rec = ModuleCallRecorder(torch, time.perf_counter_ns, lambda: False)
    assert rec.install()
    Two()(torch.randn(2, 4))
    shared(torch.randn(2, 4))  # called alone after a parent called it: keeps that path (a recompute's case)
    nn.ReLU()(torch.randn(2))  # never called inside another: a root of its own, named by its class
    out = rec.remove()
    assert (len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)) == before
    paths = [out["paths"][i] for i in out["path"]]
    assert paths == ["Two", "Two.blocks.0", "Two.blocks.0.0", "Two.blocks.1.0", "Two.shared", "Two.shared", "ReLU"]
    assert out["depth"] == [0, 1, 2, 1, 1, 0, 0]
    assert all(s <= e for s, e in zip(out["start"], out["end"]))
    assert out["end"][0] >= max(out["end"][1:5]) and out["start"][0] <= min(out["start"][1:5]) < out["start"][5]


def test_no_hooks_after_torch_compile(tmp_path):
    # in a process of its own: dynamo's counters are global
    code = (
        "import time, torch\n"
        "from dlscope.capture.module_calls import ModuleCallRecorder\n"
        "m = torch.compile(torch.nn.Linear(2, 2), backend='eager')\n"
        "m(torch.randn(1, 2))\n"
        "r = ModuleCallRecorder(torch, time.perf_counter_ns, lambda: False)\n"
        "print(r.install(), r.reason_off)\n"
    )
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[1] / "src"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False the program compiled with torch.compile before the traced steps"


# ---- the advice: where the fp32 matrix math sits, on a real H100 trace with module calls laid over it ----


def _with_modules(data: ProfileData, out: Path) -> ProfileData:
    """The imported GPT trace (6 blocks) again, with module calls laid over its forward passes: the
    root over each forward phase, per block a Block call from its first to its last linear op, and
    each linear op in an attention (the first two of a block) or an MLP (the last two) module."""
    import pyarrow as pa

    from dlscope.store.build import ProfileBuilder
    from dlscope.store.db import query_arrow
    from dlscope.store.meta import Meta
    from dlscope.store.schema import TABLES

    fwd = q(data.con, "SELECT pid, tid, start_ns, end_ns FROM phases WHERE name = 'forward' ORDER BY start_ns")
    rows: list[tuple[int, int, int, int, str, str, int]] = []
    for pid, tid, s, e in fwd:
        rows.append((pid, tid, s - 1, e + 1, "GPT", "GPT", 0))
        lin = q(
            data.con,
            f"""SELECT start_ns, end_ns FROM ops WHERE name = 'aten::linear' AND depth = 0 AND tid = {tid}
                AND start_ns BETWEEN {s} AND {e} ORDER BY start_ns""",
        )
        assert len(lin) == 24
        for b in range(6):
            four = lin[4 * b : 4 * b + 4]
            rows.append((pid, tid, four[0][0] - 1, four[-1][1] + 1, f"GPT.h.{b}", "Block", 1))
            for j, (a, z) in enumerate(four):
                role, cls = ("attn", "Attention") if j < 2 else ("mlp", "MLP")
                rows.append((pid, tid, a, z, f"GPT.h.{b}.{role}", cls, 2))
    builder = ProfileBuilder()
    for spec in TABLES:
        if spec.name != "strings" and data.has(spec.name):
            builder.add(spec.name, query_arrow(data.con, f"SELECT * FROM {spec.name}"))
    cols = ("pid", "tid", "start_ns", "end_ns", "name", "type", "depth")
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})
    builder.add("module_calls", table.append_column("rank", pa.array([0] * len(rows), pa.int32())))
    builder.write(out, Meta.from_dict(data.meta.to_dict()))
    return ProfileData.open(out)


def test_tensor_core_advice_says_where_the_fp32_math_sits(tmp_path, tmp_path_factory):
    from dlscope.application.advise import advise

    from .report_helpers import fixture_path, imported

    base = ProfileData.open(imported(fixture_path("h100_gpt6_fp32"), tmp_path_factory))
    data = _with_modules(base, tmp_path / "m.dlscope")
    # plain Python: each fp32 CUDA-core kernel's module, by its launch
    attribute = _attributor(data)
    kernels = q(
        data.con,
        """SELECT a.tid, a.start_ns, k.end_ns - k.start_ns FROM kernels k
           JOIN api a ON a.rank = k.rank AND a.correlation_id = k.correlation_id
           SEMI JOIN sel_steps s ON s.rank = k.rank AND s.step = k.step
           WHERE k.step IN (SELECT step FROM module_calls)
             AND regexp_matches(k.name, 'sgemm|gemm_f32|_ffma')""",
    )
    assert kernels
    total = sum(d for _, _, d in kernels)
    in_mlp = 0
    for tid, t, d in kernels:
        got = attribute(tid, t)
        if got is not None and got[1] is not None and ".mlp" in got[1]:
            in_mlp += d
    finding = next(f for f in advise(data).findings if f.id == "no_tensor_cores")
    text = finding.evidence.text
    # the MLPs hold two thirds (the deepest module holding more than half); the text says so
    assert 50 < 100 * in_mlp / total < 100
    assert text.endswith(f"; {100 * in_mlp / total:.0f}% of it in `GPT.h.*.mlp`"), text
    # without module calls the text says nothing of modules
    plain = next(f for f in advise(base).findings if f.id == "no_tensor_cores")
    assert "of it in" not in plain.evidence.text and "largest part" not in plain.evidence.text


def test_each_op_lands_in_the_module_of_its_kind(gpt):
    """The module calls (dlscope's clock) and the ops (Kineto's, shifted onto it) line up: every
    linear, layer norm, embedding and GELU op of a traced step lies in a call of that class."""
    data, _ = gpt
    kinds = {"aten::linear": "Linear", "aten::layer_norm": "LayerNorm", "aten::embedding": "Embedding"}
    kinds["aten::gelu"] = "GELU"
    calls = q(data.con, "SELECT tid, start_ns, end_ns, type FROM module_calls")
    ops = q(
        data.con,
        f"""SELECT tid, start_ns, end_ns, name FROM ops WHERE depth = 0 AND name IN ({", ".join(map(repr, kinds))})
            AND step IN (SELECT step FROM module_calls)""",
    )
    assert len(ops) == 5 * (9 + 5 + 2 + 2)  # per step: 9 linear, 5 layer norms, 2 embeddings, 2 GELU
    for tid, s, e, name in ops:
        hold = [c for c in calls if c[0] == tid and c[1] <= s and e <= c[2]]
        assert max(hold, key=lambda c: c[1])[3] == kinds[name], name


@pytest.mark.parametrize("mode", ["nonreentrant", "reentrant"])
def test_checkpointed_blocks_keep_their_paths_and_their_backward(tmp_path, mode):
    """Activation checkpointing runs each block's forward again inside backward (on CPU on the main
    thread, with no module call open): the recompute keeps the block's path, counts as its backward
    work, and not as forward calls."""
    import os
    import subprocess

    out = tmp_path / "ck.dlscope"
    env = dict(os.environ, MODULE_MODELS_CHECKPOINT=mode)
    env.pop("DLSCOPE_SESSION", None)
    cmd = [sys.executable, "-m", "dlscope", "profile", "-o", str(out), "--quiet", "--"]
    r = subprocess.run([*cmd, sys.executable, str(PROGRAMS / "module_models.py"), "gpt", "8"], env=env, timeout=300)
    assert r.returncode == 0
    data = ProfileData.open(out)
    roots = {n for (n,) in q(data.con, "SELECT DISTINCT name FROM module_calls") if "." not in n}
    assert roots == {"GPT"}
    _check_against_plain_python(data)
    rows = {r.module: r for r in module_view(data).rows}
    block = rows["GPT.transformer.h.*"]
    assert block.calls_per_step == 2 and block.depth == 1  # the two blocks' forward calls, not their recompute
    assert block.bwd_host_ms > 0.5 * rows["GPT"].bwd_host_ms  # the blocks' backward (with recompute) is theirs
    assert rows["GPT.transformer.h.*.mlp.0"].bwd_host_ms > 0


def test_timeline_holds_the_module_calls(cli, tmp_path):
    import gzip

    src = Path(__file__).parent / "data" / "module_view" / "gpt_cpu.dlscope"
    out = tmp_path / "t.trace.json.gz"
    r = cli("export", src, "-o", out)
    assert r.code == 0, r.err
    with gzip.open(out) as f:
        events = json.load(f)["traceEvents"]
    got = sorted((e["name"], round(e["dur"] * 1000)) for e in events if e.get("cat") == "python_function")
    data = ProfileData.open(src)
    want = sorted((n, d) for n, d in q(data.con, "SELECT name, end_ns - start_ns FROM module_calls"))
    assert [g[0] for g in got] == [w[0] for w in want]
    assert all(abs(g[1] - w[1]) <= 1 for g, w in zip(got, want))
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert any(n.startswith("modules") for n in names)
    # the Kineto importer reads the timeline back, leaving the module events out
    assert cli("import", out, "-o", tmp_path / "back.dlscope").code == 0
