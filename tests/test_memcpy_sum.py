"""memcpy_sum against plain Python over the Kineto JSON (counts, bytes, time, bandwidth, overlap
with compute kernels), on the ResNet fixture and on a two-rank HTA corpus trace."""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal

import pytest

from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.analysis.reports import memcpy_sum
from dlscope.vocabulary.collectives import COMMUNICATION_RE

from . import kineto_reference as ref
from .conftest import DATA, corpus_file
from .report_helpers import US, imported, make_profile


def expected(paths) -> dict[tuple, dict]:
    out: dict[tuple, dict] = defaultdict(lambda: dict(count=0, bytes=0, ns=0, overlap=0))
    for path in paths:
        doc = ref.load(path)

        def span(e, doc=doc):
            s = ref.ns(doc, e["ts"])
            return s, s + int(Decimal(e["dur"]) * 1000)

        compute = defaultdict(list)
        for e in ref.events(doc, "kernel"):
            if not re.search(COMMUNICATION_RE, e["name"].lower()):
                compute[e["args"].get("device", e["pid"])].append(span(e))
        islands = {d: ref.merge_intervals(v) for d, v in compute.items()}
        for e in ref.events(doc, "gpu_memcpy"):
            m = re.match(r"Memcpy (\w+) \((\w+) -> (\w+)\)", e["name"])
            key = (m.group(1), m.group(2).lower(), m.group(3).lower())
            s, t = span(e)
            r = out[key]
            r["count"] += 1
            r["bytes"] += e["args"]["bytes"]
            r["ns"] += t - s
            r["overlap"] += sum(
                max(0, min(t, b) - max(s, a)) for a, b in islands.get(e["args"].get("device", e["pid"]), [])
            )
    return out


def _check(table, want):
    got = {(r["direction"], r["src_kind"], r["dst_kind"]): r for r in table.to_pylist()}
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        assert (g["count"], g["bytes"]) == (w["count"], w["bytes"]), key
        assert g["total_ms"] == pytest.approx(w["ns"] / 1e6), key
        assert g["bandwidth_gbps"] == pytest.approx(w["bytes"] / w["ns"]), key
        assert g["overlap_ms"] == pytest.approx(w["overlap"] / 1e6, abs=1e-9), key


def test_resnet_pageable_copies(tmp_path_factory):
    path = DATA / "kineto" / "h100_resnet50_phases.trace.json.gz"
    r = memcpy_sum.compute(ProfileData.open(imported(path, tmp_path_factory)))
    _check(r.table, expected([path]))
    top = r.table.to_pylist()[0]
    assert (top["direction"], top["src_kind"]) == ("HtoD", "pageable") and top["bandwidth_gbps"] < 20
    assert any("pageable host memory" in n for n in r.notes)


def test_two_ranks_with_copies_hidden_behind_compute(tmp_path_factory):
    src = corpus_file("trace_filter")
    files = sorted(src.glob("*.json.gz"))
    data = ProfileData.open(imported(src, tmp_path_factory), Selection(include_warmup=True))
    r = memcpy_sum.compute(data)
    _check(r.table, expected(files))
    assert any(row["overlap_pct"] > 50 for row in r.table.to_pylist())


def test_overlap_is_with_compute_only(tmp_path):
    k = [
        dict(device=0, stream=7, start_ns=0, end_ns=10 * US, name="gemm"),
        dict(device=0, stream=8, start_ns=10 * US, end_ns=40 * US, name="ncclDevKernel_AllGather_RING_LL"),
        dict(device=1, stream=7, start_ns=0, end_ns=40 * US, name="gemm_on_another_gpu"),
    ]
    m = [
        dict(
            device=0,
            stream=9,
            start_ns=5 * US,
            end_ns=25 * US,
            bytes=20_000,
            copy_kind="HtoD",
            src_kind="pinned",
            dst_kind="device",
        )
    ]
    row = memcpy_sum.compute(make_profile(tmp_path, kernels=k, memcpy=m)).table.to_pylist()[0]
    assert row["overlap_ms"] == pytest.approx(0.005) and row["overlap_pct"] == pytest.approx(25)
    assert row["bandwidth_gbps"] == pytest.approx(1.0)  # 20 kB in 20 us
