"""`dlscope diff` on a real naive/optimized ResNet-50 pair: the suite's baseline (DataLoader without
workers, pageable copies, .item() per step, fp32) against its variant with DataLoader workers, both
recorded on an H100 under `dlscope profile` (default mode)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from dlscope.analysis.compare.diff import compare
from dlscope.analysis.context import ProfileData

from .conftest import DATA

NAIVE = DATA / "advice_truth" / "cnn_baseline_default.dlscope"
WORKERS = DATA / "advice_truth" / "cnn_workers_default.dlscope"


def _untraced_mean_ms(profile) -> float:
    """Mean of the steps timing statistics use (not warm-up, not traced), straight from Parquet."""
    t = pq.read_table(profile / "steps.parquet").to_pydict()
    d = [e - s for s, e, w, tr in zip(t["start_ns"], t["end_ns"], t["warmup"], t["traced"]) if not w and not tr]
    return float(np.mean(d)) / 1e6


@pytest.fixture(scope="module")
def pair():
    return compare(ProfileData.open(NAIVE), ProfileData.open(WORKERS))


def test_the_rows_explain_the_change(pair):
    total = _untraced_mean_ms(WORKERS) - _untraced_mean_ms(NAIVE)
    assert total < -40  # 101 -> 49 ms
    assert pair.total_delta_ms == pytest.approx(total, rel=1e-6)
    assert sum(c.delta for c in pair.explain) == pytest.approx(total, rel=0.05)


def test_the_input_wait_is_what_went(pair):
    """Of the rows the change splits into, the GPU's idle time while the host loaded data falls
    most; input_bound is found in the naive run only."""
    split = [c for c in pair.explain if not c.name.lower().startswith(("steps not", "tracing", "other: not"))]
    top = max(split, key=lambda c: abs(c.delta))
    assert top.name.startswith("GPU idle: host loading") and top.delta < -20, top.name
    assert pair.shift("p50").significant and pair.shift("p50").delta < -40
    assert "input_bound" in {f["id"] for f in pair.advice["resolved"]}
