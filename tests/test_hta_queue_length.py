"""queue_length pinned to Holistic Trace Analysis' queue length summary and its time blocked on a
full launch queue, and its definitions checked on a hand-made timeline.

HTA's numbers are in tests/data/hta/queue_length.json (HTA 0.5.0 at full timestamp resolution;
the file and tests/data/hta/make_queue_length_reference.py say how it was made). HTA drops the
GPU work launched in a trace's last ProfilerStep unless ``include_last_profiler_step``; the same
steps are selected here (report_helpers.hta_selection).
"""

from __future__ import annotations

import gzip
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.gpu_work import gpu_work_sql
from dlscope.analysis.reports import queue_length

from .conftest import DATA
from .report_helpers import (
    US,
    hta_entry_id,
    hta_entry_source,
    hta_selection,
    imported,
    make_profile,
)

REFERENCE = json.loads((DATA / "hta" / "queue_length.json").read_text())
REL = 1e-9  # statistics of the counts: float precision
US_ABS = 1e-6  # HTA's float sums of durations in us

# Where dlscope and HTA differ, the cause is one of two artifacts of HTA (each entry's HTA series,
# dumped from TraceCounters._get_queue_length_time_series_for_rank, was diffed with dlscope's
# series_sql: once these are accounted for, both have the same events at the same instants):
#
# 1. Ties. HTA sorts the launches and GPU starts of a rank with pandas' default sort, numpy's
#    unstable quicksort, so a launch and a GPU start at one instant come out either way (on the
#    corpus about half each: launch first 111 times, start first 122 times on df_index_resolver),
#    where dlscope counts the start first. HTA's instants are the trace's own microseconds (since
#    the epoch, or since its baseTimeNanoseconds) parsed to float64, 0.25 us apart for epoch stamps
#    (2**50 us < t < 2**51 us): in a trace with ns epoch stamps (ns_resolution_trace: its sum of
#    9,752 values was off by 2) events up to 0.25 us apart are ties there. Only the order inside an
#    instant can differ, so HTA's series lies, value by value, between the series with every
#    instant's starts first (lo) and with its launches first (hi), and so do its minimum,
#    percentiles, mean and maximum (not its standard deviation); the value after each instant, and
#    so the time at a length, is the same either way. The test computes lo and hi from dlscope's
#    events on HTA's float64 instants; on a stream where no instant has both a launch and a start
#    they coincide and HTA's numbers must be equal to dlscope's, standard deviation included.
# 2. Index 0. HTA numbers the events of a trace file from 0 and marks a launch with no linked GPU
#    event by index_correlation 0 (hta/common/trace.py); its launch query keeps index_correlation
#    > 0 (hta/common/trace_symbol_table.py). So when a file's first event is a GPU operation (in
#    trace_file_list, a kernel), HTA leaves out its launch and, by its semi-join, the operation:
#    its series has 2 events fewer. dlscope counts them (the link is in the trace); the test drops
#    that pair from its model of HTA.


def _trace_files(src: Path) -> list[Path]:
    return [src] if src.is_file() else sorted(f for f in src.iterdir() if ".json" in f.name)


def _file_facts(path: Path) -> tuple[dict | None, int]:
    """A trace file's first element of traceEvents and its baseTimeNanoseconds (0 without)."""
    opener = gzip.open if path.suffix == ".gz" else open
    first, base, buf = None, 0, ""
    with opener(path, "rt") as f:
        while chunk := f.read(1 << 20):
            buf = buf[-200:] + chunk
            if first is None and (i := buf.find('"traceEvents"')) >= 0 and (j := buf.find("[", i)) >= 0:
                k = j + 1
                while k < len(buf) and buf[k].isspace():
                    k += 1
                try:
                    first = json.JSONDecoder().raw_decode(buf, k)[0]
                except json.JSONDecodeError:  # not all of it read yet: keep it whole
                    buf = buf[i:]
                    continue
            if m := re.search(r'"baseTimeNanoseconds"\s*:\s*"?(\d+)', buf):
                base = int(m.group(1))
    return first, base


_FACTS: dict[Path, tuple[list[tuple[int, int]], int]] = {}


def _hta_facts(src: Path) -> tuple[list[tuple[int, int]], int]:
    """What HTA reads differently in the trace files: (correlation id, start rounded to the us) of
    the GPU operations HTA unlinks, each file's first event when it is one (artifact 2), and the
    files' baseTimeNanoseconds (dlscope's stamps are since the epoch, HTA's the file's own)."""
    if src not in _FACTS:
        unlinked, bases = [], set()
        for f in _trace_files(src):
            ev, base = _file_facts(f)
            bases.add(base)
            args = (ev or {}).get("args") or {}
            if "stream" in args and args.get("correlation") is not None:
                unlinked.append((args["correlation"], round(ev["ts"]) + base // 1000))
        # one origin for all files: with several, the stamps would need to be mapped to their file
        assert len(bases) == 1, (src, bases)
        _FACTS[src] = (unlinked, bases.pop())
    return _FACTS[src]


def _hta_us(ts_ns: int, base_ns: int) -> float:
    """HTA's instant: the trace's own microseconds as float64 (Python's float of a fraction rounds
    correctly, as the JSON parser does). HTA subtracts the trace's first stamp, exactly (both are
    floats of the same binade), so its differences of instants are those of these floats."""
    return float(Fraction(ts_ns - base_ns, 1000))


def _series(instants: list[tuple[object, int, int]], launches_first: bool) -> list[int]:
    """The values after each event, given per instant (key, launches, starts) in time order."""
    out, v = [], 0
    for _, n_launch, n_start in instants:
        steps = [1] * n_launch + [-1] * n_start if launches_first else [-1] * n_start + [1] * n_launch
        for d in steps:
            v += d
            out.append(v)
    return out


def _time_at(instants: list[tuple[object, int, int]], m: int) -> float:
    """Time at length m or more: from each instant whose closing value is >= m to the next one."""
    total, v = 0, 0
    for (t, n_launch, n_start), nxt in zip(instants, instants[1:] + [None]):
        v += n_launch - n_start
        if nxt is not None and v >= m:
            total += nxt[0] - t
    return total


def _describe(values: list[int]) -> dict[str, float]:
    """pandas' describe(): sample std, percentiles interpolated linearly."""
    x = sorted(values)
    n = len(x)

    def q(p: float) -> float:
        pos = p * (n - 1)
        i = math.floor(pos)
        return x[i] + (x[min(i + 1, n - 1)] - x[i]) * (pos - i)

    mean = sum(x) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1)) if n > 1 else None
    return {
        "count": n,
        "mean": mean,
        "std": std,
        "min": x[0],
        "25%": q(0.25),
        "50%": q(0.5),
        "75%": q(0.75),
        "max": x[-1],
    }


class Model:
    """One stream's events as dlscope counts them, per instant at dlscope's ns (``ns``) and at
    HTA's float64 us with HTA's unlinked pair left out (``hta``), and the bounds of HTA's series."""

    def __init__(self, events: list[tuple[int, int, int]], unlinked: set[int], base_ns: int):
        self.dropped = sum(1 for _, _, c in events if c in unlinked)
        self.ns = self._instants([(t, d) for t, d, _ in events])
        self.hta = self._instants([(_hta_us(t, base_ns), d) for t, d, c in events if c not in unlinked])
        self.lo, self.hi = _describe(_series(self.hta, False)), _describe(_series(self.hta, True))
        self.mixed = sum(1 for _, a, b in self.hta if a and b)  # instants HTA may order either way

    @staticmethod
    def _instants(events: list[tuple[object, int]]) -> list[tuple[object, int, int]]:
        out: list[list] = []
        for t, d in sorted(events, key=lambda e: e[0]):
            if not out or out[-1][0] != t:
                out.append([t, 0, 0])
            out[-1][1 if d > 0 else 2] += 1
        return [tuple(i) for i in out]


_MODELS: dict[tuple[str, bool], dict[tuple[int, int], Model]] = {}


def _models(entry, data: ProfileData) -> dict[tuple[int, int], Model]:
    key = (entry["path"], entry["include_last_profiler_step"])
    if key not in _MODELS:
        s = queue_length.series_sql(data, gpu_work_sql(data))
        events: dict[tuple[int, int], list] = {}
        for r in data.rows(f"SELECT rank, stream, ts_ns, delta, correlation_id FROM ({s})"):
            events.setdefault((r["rank"], r["stream"]), []).append((r["ts_ns"], r["delta"], r["correlation_id"]))
        unlinked: dict[tuple[int, int], set[int]] = {}
        hta_unlinked, base_ns = _hta_facts(hta_entry_source(entry))
        for corr, us in hta_unlinked:
            # the stream and rank of that GPU operation: its start (rounded to the us) and correlation id
            for k, ev in events.items():
                if any(c == corr and d < 0 and round(t / 1000) - us in (-1, 0, 1) for t, d, c in ev):
                    unlinked.setdefault(k, set()).add(corr)
        _MODELS[key] = {k: Model(ev, unlinked.get(k, set()), base_ns) for k, ev in events.items()}
    return _MODELS[key]


def _open(entry, tmp_path_factory) -> ProfileData:
    src = hta_entry_source(entry)
    if src is None or not src.exists():
        pytest.skip(f"{entry['path']} is not here (shared/ beside the clone)")
    path = imported(src, tmp_path_factory)
    data = ProfileData.open(path)
    return ProfileData.open(path, hta_selection(data, entry["include_last_profiler_step"]))


def _ours(data: ProfileData, max_queue_length: int) -> dict[tuple[int, int], dict]:
    return {(r["rank"], r["stream"]): r for r in queue_length.compute(data, max_queue_length).table.to_pylist()}


def _params() -> list:
    return [pytest.param(e, id=hta_entry_id(e)) for e in REFERENCE["entries"]]


@pytest.mark.parametrize("entry", _params())
def test_agrees_with_hta_queue_length_summary(entry, tmp_path_factory):
    data = _open(entry, tmp_path_factory)
    ours = _ours(data, queue_length.MAX_QUEUE_LENGTH)
    models = _models(entry, data)
    # the same streams: HTA has a row for every stream with a launch linked to GPU work
    assert set(ours) == set(models) == {(h["rank"], h["stream"]) for h in entry["summary"]}
    for h in entry["summary"]:
        k = (h["rank"], h["stream"])
        o, mod = ours[k], models[k]
        # the report is the model's ns series, GPU starts first at one ns
        mine = _describe(_series(mod.ns, False))
        assert o["events"] == mine["count"] and (o["min"], o["max"]) == (mine["min"], mine["max"]), (o, mine)
        for col, ref in (("mean", "mean"), ("p25", "25%"), ("p50", "50%"), ("p75", "75%"), ("std", "std")):
            assert (
                o[col] == pytest.approx(mine[ref], rel=REL, abs=1e-9)
                if mine[ref] is not None
                else (o[col] is None or math.isnan(o[col]))
            ), (col, o, mine)
        # HTA counts the same events but the unlinked pair (artifact 2)
        assert h["count"] == o["events"] - mod.dropped == mod.lo["count"], (o, h)
        if not mod.mixed and not mod.dropped:  # no artifact: exact
            for col, ref in (
                ("min", "min"),
                ("max", "max"),
                ("mean", "mean"),
                ("p25", "25%"),
                ("p50", "50%"),
                ("p75", "75%"),
            ):
                assert o[col] == pytest.approx(h[ref], rel=REL, abs=1e-9), (col, o, h)
            if h["std"] is None:  # one value: pandas' sample deviation is NaN
                assert o["std"] is None or math.isnan(o["std"])
            else:
                assert o["std"] == pytest.approx(h["std"], rel=REL, abs=1e-9), (o, h)
            continue
        # artifact 1: HTA's statistics between those of its instants' two extreme orders
        for col in ("min", "25%", "50%", "75%", "max", "mean"):
            eps = 1e-9 * max(1.0, abs(h[col]))
            assert mod.lo[col] - eps <= h[col] <= mod.hi[col] + eps, (col, mod.mixed, mod.lo, mod.hi, h)
        if not mod.mixed:  # only artifact 2: one order, so exact against the model
            assert h["std"] == pytest.approx(mod.lo["std"], rel=REL, abs=1e-9), (mod.lo, h)


@pytest.mark.parametrize("entry", _params())
def test_agrees_with_hta_time_blocked_on_full_queue(entry, tmp_path_factory):
    data = _open(entry, tmp_path_factory)
    models = _models(entry, data)
    for m in REFERENCE["max_queue_lengths"]:
        ours = _ours(data, m)
        hta = {h["rank"]: h for h in entry["blocked"][str(m)]}
        for k, o in ours.items():  # the report's time is the model's, to the ns
            assert o["blocked_ms"] * 1e6 == pytest.approx(_time_at(models[k].ns, m), abs=1e-3), (m, o)
        for rank in {r for r, _ in models}:
            streams = sorted(s for r, s in models if r == rank)
            # HTA's series reaches m: surely where the starts-first order does, maybe where launches-first does
            sure = [s for s in streams if models[(rank, s)].lo["max"] >= m]
            maybe = [s for s in streams if models[(rank, s)].hi["max"] >= m]
            assert rank in hta if sure else (rank not in hta or maybe), (m, rank, sure, maybe)
            if rank not in hta:
                continue
            h = hta[rank]
            # HTA keeps one row per rank: the last stream (in stream order) at the length
            # (hta/analyzers/trace_counters.py overwrites result[rank] per stream); here every stream
            assert h["stream"] in maybe and not [s for s in sure if s > h["stream"]], (m, h, sure, maybe)
            mod = models[(rank, h["stream"])]
            # the time at the length does not depend on the order inside an instant: exact on HTA's instants
            assert h["duration_at_max_queue_length"] == pytest.approx(_time_at(mod.hta, m), rel=REL, abs=US_ABS), (m, h)
            # dlscope's time is on its ns stamps: it differs from HTA's by HTA's rounding to float64 us
            # (0 on whole-us traces)
            o = ours[(rank, h["stream"])]
            tol = abs(_time_at(mod.ns, m) / 1e3 - _time_at(mod.hta, m)) + US_ABS
            assert o["blocked_ms"] * 1e3 == pytest.approx(h["duration_at_max_queue_length"], abs=tol), (m, o, h)
            # HTA's share divides by its whole trace's span (trace_duration), dlscope's by the span of
            # the launches and GPU starts: the durations agree, so the shares do over HTA's span
            span = entry["trace_duration"][str(rank)]
            assert o["blocked_ms"] * 1e3 / span == pytest.approx(
                h["relative_duration_at_max_queue_length"], rel=1e-6, abs=tol / span
            ), (m, o, h)


def test_reference_covers_the_fixtures_and_the_corpus():
    paths = {e["path"] for e in REFERENCE["entries"]}
    assert {f"tests/data/kineto/h100_{n}.trace.json.gz" for n in ("resnet50_phases", "gpt6_fp32", "gpt6_bf16")} <= paths
    assert sum(p.startswith("corpus/") for p in paths) >= 10
    assert REFERENCE["ns_rounding_disabled"] and "HolisticTraceAnalysis 0.5.0" in REFERENCE["tool"]
    # the small lengths make HTA's blocked sum non-empty on some traces: the comparison is not vacuous
    assert any(e["blocked"]["2"] for e in REFERENCE["entries"])
    assert REFERENCE["max_queue_lengths"][0] == queue_length.MAX_QUEUE_LENGTH


def test_definitions_on_a_hand_made_timeline(tmp_path):
    # stream 7: launches at 0, 1, 2 us; kernels start at 5, 10, 12 (and end before the next starts).
    # series: +1@0 (1), +1@1 (2), +1@2 (3), -1@5 (2), -1@10 (1), -1@12 (0)
    # stream 8: one copy launched with cudaMemcpyAsync at 3, started at 4: (1), (0)
    # a cudaGraphLaunch and a kernel with no launch call are not counted
    api = [
        dict(pid=1, tid=1, start_ns=t * US, end_ns=t * US + 500, name="cudaLaunchKernel", correlation_id=i + 1)
        for i, t in enumerate((0, 1, 2))
    ]
    api += [
        dict(pid=1, tid=1, start_ns=3 * US, end_ns=3 * US + 500, name="cudaMemcpyAsync", correlation_id=10),
        dict(pid=1, tid=1, start_ns=6 * US, end_ns=7 * US, name="cudaGraphLaunch", correlation_id=20),
    ]
    k = [
        dict(device=0, stream=7, start_ns=s * US, end_ns=(s + 1) * US, name=f"k{i}", correlation_id=i + 1)
        for i, s in enumerate((5, 10, 12))
    ]
    k += [
        dict(device=0, stream=7, start_ns=14 * US, end_ns=15 * US, name="graph", correlation_id=20),
        dict(device=0, stream=7, start_ns=16 * US, end_ns=17 * US, name="orphan", correlation_id=None),
    ]
    m = [dict(device=0, stream=8, start_ns=4 * US, end_ns=5 * US, bytes=1, copy_kind="HtoD", correlation_id=10)]
    data = make_profile(tmp_path, api=api, kernels=k, memcpy=m)
    rows = {r["stream"]: r for r in queue_length.compute(data, 3).table.to_pylist()}
    s7 = rows[7]
    assert (s7["events"], s7["min"], s7["max"]) == (6, 0, 3)
    assert s7["mean"] == pytest.approx(1.5) and s7["p50"] == pytest.approx(1.5)
    assert s7["p25"] == pytest.approx(1.0) and s7["p75"] == pytest.approx(2.0)
    # at 3 from 2 us to 5 us
    assert s7["blocked_ms"] == pytest.approx(0.003)
    assert s7["blocked_pct"] == pytest.approx(100 * 3 / 12)  # span of the rank's events: 0 to 12 us
    assert (rows[8]["events"], rows[8]["max"], rows[8]["blocked_ms"]) == (2, 1, 0)
    # at HTA's capacity nothing is blocked
    assert all(r["blocked_ms"] == 0 for r in queue_length.compute(data).table.to_pylist())


def test_a_launch_and_a_start_at_the_same_instant_count_the_start_first(tmp_path):
    api = [
        dict(pid=1, tid=1, start_ns=0, end_ns=US, name="cudaLaunchKernel", correlation_id=1),
        dict(pid=1, tid=1, start_ns=5 * US, end_ns=6 * US, name="cudaLaunchKernel", correlation_id=2),
    ]
    k = [
        dict(device=0, stream=7, start_ns=5 * US, end_ns=6 * US, name="a", correlation_id=1),
        dict(device=0, stream=7, start_ns=8 * US, end_ns=9 * US, name="b", correlation_id=2),
    ]
    row = queue_length.compute(make_profile(tmp_path, api=api, kernels=k)).table.to_pylist()[0]
    # 1, then at 5 us: start (0) before launch (1), then 0
    assert (row["events"], row["max"], row["mean"]) == (4, 1, 0.5)


def test_without_runtime_calls_says_so(tmp_path):
    k = [dict(device=0, stream=7, start_ns=0, end_ns=US, name="a", correlation_id=1)]
    data = make_profile(tmp_path, kernels=k)
    assert queue_length.REPORT.missing(data) == "the profile has no api data"
    r = queue_length.compute(data)
    assert r.table.num_rows == 0 and r.notes == ["the profile has no runtime calls"]
