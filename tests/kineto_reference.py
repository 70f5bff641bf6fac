"""An independent reading of a Kineto trace with plain json + Decimal, for tests to compare
dlscope's import against."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def ns(doc: dict[str, Any], us: Any) -> int:
    """Kineto time (us, relative to baseTimeNanoseconds when present) -> epoch ns."""
    base = int(doc.get("baseTimeNanoseconds") or 0)
    return base + int(Decimal(us) * 1000)


def events(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def kernel_totals(doc: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """kernel name -> (count, total duration ns)."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in events(doc, "kernel"):
        out[e["name"]][0] += 1
        out[e["name"]][1] += int(Decimal(e["dur"]) * 1000)
    return {k: (c, d) for k, (c, d) in out.items()}


def profiler_steps(doc: dict[str, Any]) -> list[tuple[int, int, int]]:
    """(step number, start ns, end ns) of every ProfilerStep#N."""
    out = []
    for e in events(doc, "user_annotation"):
        if e["name"].startswith("ProfilerStep#"):
            s = ns(doc, e["ts"])
            out.append((int(e["name"].split("#")[1]), s, s + int(Decimal(e["dur"]) * 1000)))
    return sorted(out)


def merge_intervals(intervals: list[tuple[int, int]]) -> list[list[int]]:
    """Union of [start, end] intervals, sorted (plain Python, the reference for SQL unions)."""
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out
