"""The timeline's fast paths checked against slow, obvious computations: which tracks need
overflow lanes (against a check of every pair of slices), microsecond text (against integer
arithmetic), one file given up for parts when its bytes exceed the limit, and the export
command's start-up, which loads neither the collectors nor the reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dlscope
from dlscope.analysis.core.context import ProfileData
from dlscope.render.timeline import TimelineOptions, export_timeline, part_paths
from dlscope.render.timeline.events import define_macros
from dlscope.render.timeline.lanes import crossing_tracks

from . import timeline_checks


def _crossing_pairs(items: list[tuple[int, int]]) -> bool:
    """Whether one slice starts strictly inside another and ends after it (every pair)."""
    return any(s1 < s2 < e1 < e2 for s1, e1 in items for s2, e2 in items)


@pytest.mark.parametrize("seed", range(6))
def test_crossing_tracks_agrees_with_every_pair(seed):
    rng = np.random.default_rng(seed)
    rows = []
    for trk in range(40):
        n = int(rng.integers(0, 30))
        if trk % 3 == 0:  # nested by construction: opened and closed last-in first-out, time
            # moving on by 0 or 1 (equal starts, zero-length slices, a slice ending as the next begins)
            items, open_, t = [], [], 0
            while len(items) < n:
                t += int(rng.integers(0, 2))
                if open_ and rng.random() < 0.5:
                    items.append((open_.pop(), t))
                else:
                    open_.append(t)
        else:  # random times on a small grid: equal starts, touching and zero-length slices
            s = rng.integers(0, 50, n)
            items = [(int(a), int(a + d)) for a, d in zip(s, rng.integers(0, 12, n))]
        rows += [(trk, s, e) for s, e in items]
    rows.sort(key=lambda r: (r[0], r[1], -r[2]))
    trk, start, end = (np.array(c, dtype=np.int64) for c in zip(*rows))
    got = set(crossing_tracks(trk, start, end).tolist())
    by_track: dict[int, list[tuple[int, int]]] = {}
    for t, s, e in rows:
        by_track.setdefault(t, []).append((s, e))
    want = {t for t, items in by_track.items() if _crossing_pairs(items)}
    assert got == want
    assert want and want != set(by_track)  # both kinds of track were drawn


def test_microseconds_are_exact_text_of_nanoseconds():
    """ts and dur: the integer nanoseconds as microseconds with three decimals, also past the
    range where a double holds them exactly (the fast path's limit)."""
    base = 1_700_000_000_000_000_000
    rng = np.random.default_rng(1)
    offsets = [
        0,
        1,
        999,
        1000,
        1001,
        2**50 - 1,
        2**50,
        2**50 + 1,
        2**53 + 7,
        10**16 + 123_456,
        *rng.integers(0, 2**50, 2000).tolist(),
        *rng.integers(2**50, 2**60, 200).tolist(),
    ]
    con = duckdb.connect()
    con.execute("CREATE TABLE strings (id INTEGER, value VARCHAR)")
    define_macros(con, base)
    got = con.execute(
        """SELECT tl_us(x + $b), tl_dur(x) FROM (
        SELECT unnest($x::BIGINT[]) AS x, unnest(range(len($x::BIGINT[]))) AS i) ORDER BY i""",
        {"b": base, "x": offsets},
    ).fetchall()
    want = [f"{x // 1000}.{x % 1000:03d}" for x in offsets]
    assert [g[0] for g in got] == want and [g[1] for g in got] == want
    assert con.execute("SELECT tl_dur(-5)").fetchall()[0][0] == "0.000"


def test_bytes_over_the_limit_give_up_one_file_for_parts(resnet_profile, tmp_path):
    """Few events but a small byte limit: the file begun whole is dropped and the parts hold
    every event once, each under the limit."""
    data = ProfileData.open(resnet_profile)
    whole = tmp_path / "whole.json"
    export_timeline(data, whole)
    _, all_events, whole_size = timeline_checks.read(whole)
    out = tmp_path / "b.json"
    res = export_timeline(data, out, TimelineOptions(part_bytes=whole_size // 3))
    assert len(res.files) >= 3 and res.files == part_paths(out, len(res.files))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["whole.json", *(f.name for f in res.files)])
    seen: Counter = Counter()
    for f in res.files:
        _, events, size = timeline_checks.read(f)
        assert size <= whole_size // 3
        timeline_checks.check_structure(events)
        seen.update(json.dumps(e, sort_keys=True) for e in events if e["ph"] != "M")
    assert seen == Counter(json.dumps(e, sort_keys=True) for e in all_events if e["ph"] != "M")
    assert res.events == sum(seen.values())


def test_export_starts_without_collectors_reports_or_rich(resnet_profile, tmp_path):
    """What ``dlscope export`` loads: not the capture stack, the report modules, the importers
    or rich (stderr is no terminal here), which would only add to its start-up."""
    out = tmp_path / "t.json.gz"
    # as the console script runs it: main() reads sys.argv
    code = (
        "import sys; from dlscope.cli import main; sys.argv = ['dlscope', 'export', *sys.argv[1:]]; rc = main(); "
        "print(' '.join(sorted(sys.modules))); sys.exit(rc)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(dlscope.__file__).parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(resnet_profile), "-o", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(proc.stdout.split())
    assert "dlscope.render.timeline" in loaded and out.exists()
    unwanted = {
        "dlscope.api",
        "dlscope.capture.cupti",
        "dlscope.capture.torch",
        "dlscope.capture.session",
        "dlscope.analysis.reports.step_sum",
        "dlscope.analysis.reports.op_sum",
        "dlscope.importers",
        "rich",
        "pandas",
    }
    assert not unwanted & loaded


def test_threaded_file_writes_in_order_and_reports_a_failed_write(tmp_path):
    from dlscope.render.timeline.writer import _ThreadedFile

    chunks = [bytes([i % 256]) * (1000 + i) for i in range(50)]
    with _ThreadedFile(tmp_path / "a.bin") as f:
        for c in chunks:
            f.write(memoryview(c))
    assert (tmp_path / "a.bin").read_bytes() == b"".join(chunks)

    class Full:
        def write(self, buf):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    f = _ThreadedFile(tmp_path / "b.bin")
    f._file.close()
    f._file = Full()
    with pytest.raises(OSError, match="No space"):
        try:
            for c in chunks:  # the error reaches this thread at a later write or at close
                f.write(c)
        finally:
            f.close()
    assert not f._thread.is_alive()
