"""Reading an exported timeline back with plain Python and checking that it is a well-formed
Chrome trace that Perfetto shows whole: the rules the timeline tests apply to every file."""

from __future__ import annotations

import gzip
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def read(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """(document, events, uncompressed size in bytes)."""
    raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    doc = json.loads(raw)
    return doc, doc["traceEvents"], len(raw)


def _is_us(v: Any) -> bool:
    """A number of microseconds with at most three decimals (ns precision)."""
    return isinstance(v, (int, float)) and math.isfinite(v) and abs(v * 1000 - round(v * 1000)) < 1e-3


def check_structure(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Assert every rule; returns what was found (names of processes and tracks, flows)."""
    procs, threads = {}, {}
    for e in events:
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index"), e
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and isinstance(e["args"], dict)
            if e["name"] == "process_name":
                procs[e["pid"]] = e["args"]["name"]
            elif e["name"] == "thread_name":
                threads[(e["pid"], e["tid"])] = e["args"]["name"]
    # times in integer ns: ts + dur in floats can end a hair after the next slice's start
    slices: dict[tuple[int, int], list[tuple[int, int, dict]]] = defaultdict(list)
    flows: dict[int, dict[str, dict]] = defaultdict(dict)
    for e in events:
        ph = e["ph"]
        assert ph in ("M", "X", "i", "C", "s", "f"), e
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), e
        assert e["pid"] in procs, f"event in an unnamed process: {e}"
        if ph == "M":
            continue
        assert _is_us(e["ts"]) and e["ts"] >= 0, e
        if ph == "X":
            assert isinstance(e["name"], str) and isinstance(e["cat"], str) and isinstance(e["args"], dict), e
            assert _is_us(e["dur"]) and e["dur"] >= 0, e
            assert (e["pid"], e["tid"]) in threads, f"slice on an unnamed track: {e}"
            start = round(e["ts"] * 1000)
            slices[(e["pid"], e["tid"])].append((start, start + round(e["dur"] * 1000), e))
        elif ph == "i":
            assert e["s"] == "t" and (e["pid"], e["tid"]) in threads, e
        elif ph == "C":
            assert e["args"] and all(isinstance(v, (int, float)) and math.isfinite(v) for v in e["args"].values()), e
        else:
            assert isinstance(e["id"], int), e
            assert ph not in flows[e["id"]], f"flow id {e['id']} has two '{ph}' events"
            flows[e["id"]][ph] = e
            if ph == "f":
                assert e["bp"] == "e", e
    # slices of one track nest (Perfetto drops a slice that crosses its neighbour)
    for track, items in slices.items():
        stack: list[int] = []
        for s, t, e in sorted(items, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or t <= stack[-1], f"slice crosses its parent on {threads[track]}: {e}"
            stack.append(t)
    # flows come in pairs: start on the launching call's track at its start, finish at the start
    # of GPU work on a stream track
    starts = {(k, s) for k, v in slices.items() for s, _, _ in v}
    gpu_starts = {(k, s) for k, v in slices.items() for s, _, e in v if e["cat"] in GPU_CATS}
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is not paired: {pair}"
        s, f = pair["s"], pair["f"]
        assert ((s["pid"], s["tid"]), round(s["ts"] * 1000)) in starts, f"flow {fid} starts on no slice"
        assert ((f["pid"], f["tid"]), round(f["ts"] * 1000)) in gpu_starts, f"flow {fid} ends on no GPU slice"
        assert f["ts"] >= s["ts"], f"flow {fid} goes back in time"
    return {
        "processes": procs,
        "threads": threads,
        "flows": len(flows),
        "slices_by_track": {threads[k]: len(v) for k, v in slices.items()},
    }


def counts(events: list[dict[str, Any]]) -> Counter:
    return Counter((e["ph"], e.get("cat")) for e in events if e["ph"] != "M")
