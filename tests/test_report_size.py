"""The HTML report stays small however long the run: plots are downsampled, tables capped.

A synthetic hour-long profile (the shape of a long default-mode run: many short steps, three
phases each, a GPU counter sampled every 50 ms) is built directly through the builder."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.timeseries import phase_bands, time_bins
from dlscope.application.report import build_report
from dlscope.render.html import write_report
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta

STEPS = 40_000
STEP_NS = 90_000_000  # one hour in 40k steps
T0 = 1_790_000_000_000_000_000
MAX_REPORT_BYTES = 10_000_000


def long_profile(path):
    starts = T0 + np.arange(STEPS, dtype=np.int64) * STEP_NS
    n = STEPS * 3
    off = np.tile(np.array([0, 20_000_000, 80_000_000], np.int64), STEPS)
    dur = np.tile(np.array([20_000_000, 60_000_000, 10_000_000], np.int64), STEPS)
    p_start = np.repeat(starts, 3) + off
    b = ProfileBuilder()
    b.add(
        "steps",
        pa.table(
            {
                "rank": pa.array(np.zeros(STEPS, np.int32)),
                "step": pa.array(np.arange(STEPS, dtype=np.int32)),
                "start_ns": starts,
                "end_ns": starts + STEP_NS,
                "pid": np.full(STEPS, 1, np.int64),
                "tid": np.full(STEPS, 1, np.int64),
                "source": pa.array(["dlscope"] * STEPS),
                "warmup": pa.array(np.zeros(STEPS, bool)),
            }
        ),
    )
    b.add(
        "phases",
        pa.table(
            {
                "rank": pa.array(np.zeros(n, np.int32)),
                "pid": np.full(n, 1, np.int64),
                "tid": np.full(n, 1, np.int64),
                "start_ns": p_start,
                "end_ns": p_start + dur,
                "name": pa.array(["preprocess", "run", "postprocess"] * STEPS),
                "kind": pa.array(["range"] * n),
                "source": pa.array(["dlscope"] * n),
            }
        ),
    )
    ts = np.arange(T0, T0 + STEPS * STEP_NS, 50_000_000, dtype=np.int64)
    b.add(
        "counters",
        pa.table(
            {
                "rank": pa.array(np.zeros(len(ts), np.int32)),
                "device": pa.array(np.zeros(len(ts), np.int32)),
                "ts_ns": ts,
                "metric": pa.array(["gpu_util"] * len(ts)),
                "value": (np.arange(len(ts)) % 100).astype(np.float64),
            }
        ),
    )
    meta = Meta(source="test")
    meta.start_ns, meta.end_ns = T0, T0 + STEPS * STEP_NS
    b.write(path, meta)
    return path


def test_an_hour_of_small_steps_makes_a_small_report(tmp_path):
    data = ProfileData.open(long_profile(tmp_path / "long.dlscope"))
    bins = time_bins(data)
    bands = phase_bands(data, bins).to_pylist()
    # every outermost phase instance is in exactly one band, and the bands are few
    assert sum(b["instances"] for b in bands) == data.scalar("SELECT count(*) FROM phases WHERE depth = 0")
    assert len(bands) <= 3 * bins.count
    out = tmp_path / "r.html"
    size = write_report(build_report(data), out)
    assert size == out.stat().st_size < MAX_REPORT_BYTES
    html = out.read_text()
    assert html.count('class="band"') <= 3 * bins.count * 2
    # the step-time line: groups of steps (mean, min, max), not a point per step
    assert "in groups of 40 consecutive steps" in html
    assert html.count('class="pt"') < 10_000
