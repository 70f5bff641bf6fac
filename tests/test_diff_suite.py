"""`dlscope diff` on a real naive/optimized ResNet-50 pair: the suite's baseline (DataLoader without
workers, pageable copies, .item() per step, fp32) against its variant with DataLoader workers, both
recorded on an H100 under `dlscope profile` (default mode: the warm-up and the next 5 steps traced,
the later steps untraced; the step statistics use the untraced ones)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from dlscope.analysis.compare.decompose import RESIDUAL_KEY
from dlscope.analysis.core.context import ProfileData
from dlscope.application.diff import diff

from .conftest import DATA, need_file

NAIVE = DATA / "advice_truth" / "cnn_baseline_default.dlscope"
WORKERS = DATA / "advice_truth" / "cnn_workers_default.dlscope"


def _untraced_mean_ms(profile) -> float:
    """Mean of the steps timing statistics use (not warm-up, not traced), straight from Parquet."""
    t = pq.read_table(profile / "steps.parquet").to_pydict()
    d = [e - s for s, e, w, tr in zip(t["start_ns"], t["end_ns"], t["warmup"], t["traced"]) if not w and not tr]
    return float(np.mean(d)) / 1e6


def _traced_busy_ms(profile) -> float:
    """GPU busy time per traced step that launched GPU work (the union of kernels, copies and sets
    clipped to the step), mean over those steps, from the Parquet files with numpy."""
    t = pq.read_table(profile / "steps.parquet").to_pydict()
    iv, launched = [], set()
    for name in ("kernels", "memcpy", "memset"):
        if (profile / f"{name}.parquet").exists():
            g = pq.read_table(profile / f"{name}.parquet").to_pydict()
            iv += list(zip(g["start_ns"], g["end_ns"]))
            launched |= {s for s in g["step"] if s is not None}
    steps = [
        (s0, e0)
        for st, s0, e0, w, tr in zip(t["step"], t["start_ns"], t["end_ns"], t["warmup"], t["traced"])
        if tr and not w and st in launched
    ]
    iv = np.array(sorted(iv), dtype=np.int64)
    # merge overlapping intervals: a new island starts where the start passes every earlier end
    ends = np.maximum.accumulate(iv[:, 1])
    new = np.r_[True, iv[1:, 0] > ends[:-1]]
    starts, idx = iv[new, 0], np.flatnonzero(new)
    stops = np.maximum.reduceat(iv[:, 1], idx)
    busy = [np.clip(np.minimum(stops, e0) - np.maximum(starts, s0), 0, None).sum() for s0, e0 in steps]
    assert len(steps) == 5  # the 5 traced steps after the warm-up
    return float(np.mean(busy)) / 1e6


@pytest.fixture(scope="module")
def pair():
    return diff(ProfileData.open(need_file(NAIVE)), ProfileData.open(need_file(WORKERS)))


def test_the_rows_explain_the_change(pair):
    total = _untraced_mean_ms(WORKERS) - _untraced_mean_ms(NAIVE)
    assert total < -40  # 101 -> 49 ms
    assert pair.total_delta_ms == pytest.approx(total, rel=1e-6)
    assert sum(c.delta for c in pair.explain) == pytest.approx(total, rel=1e-6)
    # tracing slowed the host in the traced steps, not the GPU: the idle rows are calibrated to
    # the untraced steps, so no row is left for the steps the rows do not split (was +27 ms)
    residual = [c for c in pair.explain if c.kind == "other" and c.name.startswith("steps not decomposed")]
    assert not residual or abs(residual[0].delta) < 0.05 * abs(total)


@pytest.mark.parametrize("side", ["a", "b"])
def test_busy_rows_are_the_traced_steps_busy_time_and_idle_fills_the_untraced_step(pair, side):
    profile = NAIVE if side == "a" else WORKERS
    dec = pair.decomposition_a if side == "a" else pair.decomposition_b
    busy_ms = _traced_busy_ms(profile)
    busy = sum(p.ms for p in dec.parts if p.kind != "idle" and p.key != RESIDUAL_KEY)
    assert busy == pytest.approx(busy_ms, rel=1e-6)
    idle = sum(p.ms for p in dec.parts if p.kind == "idle")
    assert idle == pytest.approx(_untraced_mean_ms(profile) - busy_ms, rel=1e-6)
    assert 0 < dec.idle_scale < 1  # the traced steps idled longer: the tracer slowed the host
    assert RESIDUAL_KEY not in {p.key for p in dec.parts}


def test_the_input_wait_is_what_went(pair):
    """Of the rows the change splits into, the GPU's idle time while the host loaded data falls
    most; input_bound is found in the naive run only."""
    split = [c for c in pair.explain if not c.name.lower().startswith(("steps not", "tracing", "other: not"))]
    top = max(split, key=lambda c: abs(c.delta))
    assert top.name.startswith("GPU idle: host loading") and top.delta < -20, top.name
    assert max(pair.explain, key=lambda c: abs(c.delta)) is top  # no row outside the split is larger
    assert pair.shift("p50").significant and pair.shift("p50").delta < -40
    assert "input_bound" in {f["id"] for f in pair.advice["resolved"]}
