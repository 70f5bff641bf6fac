"""Reading a Kineto trace with plain Python (json + dicts): the independent side of the timeline
tests, and a way to build GPU profiles from the real fixtures with ProfileBuilder until the Kineto
importer is on main (then :func:`build_profile` uses it).

Timestamps are parsed from the JSON text (not through a double) so nanoseconds stay exact.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import CollectorStatus, Meta

API_CATS = ("cuda_runtime", "cuda_driver")
GPU_CATS = {"kernel": "kernels", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def ns(text: str | int) -> int:
    """Microseconds as JSON text -> integer nanoseconds, exactly."""
    s = str(text)
    whole, _, frac = s.partition(".")
    sign = -1 if whole.startswith("-") else 1
    return int(whole) * 1000 + sign * int((frac + "000")[:3])


def load_events(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        doc = json.load(f, parse_float=str)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    meta = {k: v for k, v in doc.items() if k != "traceEvents"} if isinstance(doc, dict) else {}
    return events, meta


@dataclass
class KinetoCounts:
    """What a trace holds, counted in Python: the expected side of the timeline tests."""

    by_cat: Counter = field(default_factory=Counter)
    kernel_ns: int = 0
    kernel_names: Counter = field(default_factory=Counter)
    launched: int = 0  # GPU events whose correlation id matches a runtime/driver call


def count(path: Path) -> KinetoCounts:
    events, _ = load_events(path)
    c = KinetoCounts()
    corr = {
        int(e["args"]["correlation"])
        for e in events
        if e.get("ph") == "X" and e.get("cat") in API_CATS and "correlation" in e.get("args", {})
    }
    for e in events:
        if e.get("ph") != "X":
            continue
        c.by_cat[e.get("cat")] += 1
        if e.get("cat") == "kernel":
            c.kernel_ns += ns(e["dur"])
            c.kernel_names[e["name"]] += 1
        if e.get("cat") in GPU_CATS and int(e["args"].get("correlation", -1)) in corr:
            c.launched += 1
    return c


def tables(path: Path, rank: int = 0) -> tuple[dict[str, pa.Table], Meta]:
    """The trace's events as builder tables (text name columns) and a Meta."""
    events, md = load_events(path)
    base = int(md.get("baseTimeNanoseconds", 0) or 0)
    rows: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("phases", "steps", "ops", "api", "kernels", "memcpy", "memset")
    }
    launch_pid = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in API_CATS:
            launch_pid[int(e["args"]["correlation"])] = int(e["pid"])
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, a = e.get("cat"), e.get("args", {})
        start = base + ns(e["ts"])
        end = start + max(ns(e.get("dur", "0")), 0)
        common = {"rank": rank, "start_ns": start, "end_ns": end}
        ext = int(a["External id"]) if "External id" in a else None
        if cat == "user_annotation" and e["name"].startswith("ProfilerStep#"):
            rows["steps"].append(
                {
                    **common,
                    "step": int(e["name"].split("#")[1]),
                    "pid": int(e["pid"]),
                    "tid": int(e["tid"]),
                    "source": "profiler_step",
                    "warmup": False,
                }
            )
        elif cat == "user_annotation":
            rows["phases"].append(
                {
                    **common,
                    "pid": int(e["pid"]),
                    "tid": int(e["tid"]),
                    "name": e["name"],
                    "kind": "range",
                    "source": "record_function",
                }
            )
        elif cat == "cpu_op":
            rows["ops"].append(
                {
                    **common,
                    "pid": int(e["pid"]),
                    "tid": int(e["tid"]),
                    "name": e["name"],
                    "op_id": len(rows["ops"]),
                    "external_id": ext,
                    "sequence_nr": int(a["Sequence number"]) if "Sequence number" in a else None,
                    "input_shapes": json.dumps(a["Input Dims"]) if a.get("Input Dims") else None,
                    "category": cat,
                }
            )
        elif cat in API_CATS:
            rows["api"].append(
                {
                    **common,
                    "pid": int(e["pid"]),
                    "tid": int(e["tid"]),
                    "name": e["name"],
                    "correlation_id": int(a["correlation"]),
                    "external_id": ext,
                    "cbid": int(a["cbid"]) if "cbid" in a else None,
                    "kind": "driver" if cat == "cuda_driver" else "runtime",
                }
            )
        elif cat in GPU_CATS:
            corr = int(a["correlation"])
            g = {
                **common,
                "device": int(a["device"]),
                "stream": int(a["stream"]),
                "correlation_id": corr,
                "external_id": ext,
                "pid": launch_pid.get(corr),
            }
            if cat == "kernel":
                grid, block = a.get("grid", [None] * 3), a.get("block", [None] * 3)
                g.update(
                    name=e["name"],
                    grid_x=int(grid[0]),
                    grid_y=int(grid[1]),
                    grid_z=int(grid[2]),
                    block_x=int(block[0]),
                    block_y=int(block[1]),
                    block_z=int(block[2]),
                    registers=int(a["registers per thread"]),
                    shared_bytes=int(a["shared memory"]),
                )
            elif cat == "gpu_memcpy":
                kind = e["name"].split()[1]
                src, dst = e["name"].split("(")[1].rstrip(")").split(" -> ")
                g.update(bytes=int(a["bytes"]), copy_kind=kind, src_kind=src.lower(), dst_kind=dst.lower())
            else:
                g.update(bytes=int(a["bytes"]), mem_kind=e["name"].split("(")[1].rstrip(")").lower())
            rows[GPU_CATS[cat]].append(g)
    meta = Meta(source="imported:test-kineto", inputs=[str(path)], ranks=[rank])
    meta.collectors["kineto"] = CollectorStatus("ok", "", {"record_shapes": md.get("record_shapes")})
    for p in md.get("deviceProperties", []):
        meta.devices.append(
            {
                "rank": rank,
                "index": int(p["id"]),
                "name": p["name"],
                "sms": int(p["numSms"]),
                "compute_capability": f"{p['computeMajor']}.{p['computeMinor']}",
            }
        )
    return {k: pa.Table.from_pylist(v) for k, v in rows.items() if v}, meta


def build_profile(trace: Path, out: Path) -> Path:
    """A profile of ``trace``: through the Kineto importer when one is registered, else through
    :func:`tables` and the builder."""
    from dlscope.importers import IMPORTERS

    if any(i.name == "kineto" for i in IMPORTERS):
        from dlscope.importers.run import import_files

        return import_files([trace], out)
    t, meta = tables(trace)
    b = ProfileBuilder()
    b.add_all(t)
    b.write(out, meta)
    return out
