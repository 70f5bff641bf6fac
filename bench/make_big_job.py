"""Make a large multi-rank Kineto job from a real one by repeating its steps (issue 39).

    python bench/make_big_job.py --out /tmp/scale/job [--ranks 8] [--events 1000000]
        [--source /work/shared/corpus/hta/trace_filter] [--jobs 2] [--level 1]

Reads the per-rank Kineto traces of a real distributed job (default: the two ranks HTA's corpus
holds of a 128-rank NCCL job, ``trace_filter/sampled_rank-{0,1}.json.gz``: all-reduce, all-to-all
and all-gather on one GPU each) and writes ``--ranks`` traces (gzip'd JSON, ``rank-R.json.gz``) of
at least ``--events`` events each (the same steps on every rank). Every rank repeats its source's
block of whole steps (the ``ProfilerStep#N`` ranges, every host event inside them, and the GPU
events and flows their launches link to by correlation) as many times as it takes, each copy shifted
in time by the block's period (its span, GPU tail included, plus the gap between two steps) and its
ids (``correlation``, ``External id``, ``Sequence number``, ``Record function id``, ``Ev Idx``,
Python ids, flow ids) moved up by one span of all the ids, so that they stay unique and every link
(launch to kernel, op to launch, forward to backward, flow ends) still holds within a copy; step
numbers go on from the last (``ProfilerStep#551, #552`` then ``#553, #554`` ...). Events before the
block stay once, events after it (and not linked into it) go once after the last copy, metadata
events once, and the trace's ``PyTorch Profiler`` span is stretched over the whole.

A source with fewer ranks than ``--ranks`` is used cyclically: rank R is a copy of source rank
``R % n`` (so with the default source, the even ranks repeat rank 0 and the odd ranks rank 1), with
its own ``distributedInfo.rank`` and ``world_size`` set to ``--ranks``; the script says so.

Each event is serialized once into a format string (numbers kept as the source wrote them); copies
fill in the times and ids. Ranks are written in parallel (``--jobs`` processes), each streaming
through gzip: memory stays at the source trace's size whatever ``--events`` is. Nothing here is
kept as data: rerun it (8 ranks of 1M events: 15 s on 2 cores, 38 MB a rank at gzip level 1).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing
import re
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = "/work/shared/corpus/hta/trace_filter"
ID_ARGS = (
    "External id",
    "external id",
    "correlation",
    "Sequence number",
    "Record function id",
    "Ev Idx",
    "Python id",
    "Python parent id",
)
STEP = re.compile(r"^ProfilerStep#(\d+)$")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync", "mtia_ccp_events")
_RAW = "\x01"  # marks a number kept as the source's text
_SLOT = "\x02"  # marks a value a copy fills in
BATCH = 20_000  # events per write


def _ns(v: Any) -> int:
    """A Kineto time in microseconds (int or the source's decimal text) as exact nanoseconds."""
    return int(Decimal(str(v).lstrip(_RAW)) * 1000)


def _us(ns: int) -> str:
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as f:
        return dict(json.load(f, parse_float=lambda s: _RAW + s))


def sources(spec: str) -> list[Path]:
    p = Path(spec)
    files = sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz"))) if p.is_dir() else [p]
    if not files:
        raise SystemExit(f"{spec}: no trace files")
    return files


class Template:
    """One source rank's trace, split into the parts a big trace is made of."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.header = {k: v for k, v in trace.items() if k != "traceEvents"}
        events = trace["traceEvents"]
        steps = [e for e in events if e.get("ph") == "X" and STEP.match(str(e.get("name", "")))]
        if not steps:
            raise SystemExit("the source trace has no ProfilerStep#N ranges to repeat")
        self.block_start = min(_ns(e["ts"]) for e in steps)
        last_end = max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in steps)
        host_pids = {e.get("pid") for e in steps}
        numbers = sorted(int(STEP.match(e["name"]).group(1)) for e in steps)  # type: ignore[union-attr]
        self.step_span = numbers[-1] - numbers[0] + 1
        timed = [e for e in events if e.get("ph") != "M" and "ts" in e and e.get("cat") != "Trace"]
        inside: set[int] = set()
        linked: set[Any] = set()
        for i, e in enumerate(timed):
            t = _ns(e["ts"])
            if e.get("cat") not in GPU_CATS and self.block_start <= t < last_end:
                inside.add(i)
                c = e.get("args", {}).get("correlation")
                if c is not None and e.get("pid") in host_pids:
                    linked.add(c)
        for i, e in enumerate(timed):  # GPU work and flows launched from inside the block
            c = e.get("args", {}).get("correlation")
            if (c is not None and c in linked) or (e.get("ph") in ("s", "f", "t") and e.get("id") in linked):
                inside.add(i)
        self.block = [timed[i] for i in sorted(inside)]
        self.before = [e for i, e in enumerate(timed) if i not in inside and _ns(e["ts"]) < self.block_start]
        self.after = [e for i, e in enumerate(timed) if i not in inside and _ns(e["ts"]) >= self.block_start]
        self.meta_events = [e for e in events if e.get("ph") == "M"]
        self.spans = [e for e in events if e.get("cat") == "Trace" and e.get("ph") != "M"]
        block_end = max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in self.block)
        ordered = sorted(steps, key=lambda e: _ns(e["ts"]))
        gaps = [
            _ns(b["ts"]) - (_ns(a["ts"]) + _ns(a.get("dur", 0))) for a, b in zip(ordered, ordered[1:], strict=False)
        ]
        self.period = block_end - self.block_start + max([g for g in gaps if g > 0] or [1000])
        ids = [
            int(v)
            for e in events
            for v in [*(e.get("args", {}).get(k) for k in ID_ARGS), e.get("id") if e.get("ph") in "sft" else None]
            if isinstance(v, int)
        ]
        self.id_span = max(ids, default=0) + 1


def compile_event(e: dict[str, Any], slots: bool) -> tuple[str, list[tuple[str, int]]]:
    """``e`` as a format string whose fields are its time, its ids and its step number
    (``slots``), and the values each field starts from."""
    e = json.loads(json.dumps(e))  # a copy
    fields: list[tuple[str, int]] = []

    def slot(kind: str, value: int) -> str:
        fields.append((kind, value))
        return f"{_SLOT}{len(fields) - 1}{_SLOT}"

    if "ts" in e:
        e["ts"] = slot("ts", _ns(e["ts"]))
    if slots:
        m = STEP.match(str(e.get("name", "")))
        if m:
            e["name"] = slot("step", int(m.group(1)))
        args = e.get("args", {})
        for k in ID_ARGS:
            if isinstance(args.get(k), int):
                args[k] = slot("id", args[k])
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            e["id"] = slot("id", e["id"])
    text = json.dumps(e, separators=(", ", ": "))
    text = re.sub(r'"\\u0001([^"]*)"', r"\1", text)  # numbers as the source wrote them
    text = text.replace("{", "{{").replace("}", "}}")
    text = re.sub(r'"\\u0002(\d+)\\u0002"', lambda m: "{" + m.group(1) + "}", text)
    return text, fields


def _fill(fields: list[tuple[str, int]], dt: int, did: int, dstep: int) -> list[str]:
    out = []
    for kind, v in fields:
        if kind == "ts":
            out.append(_us(v + dt))
        elif kind == "id":
            out.append(str(v + did))
        else:  # a step's name, quoted
            out.append(f'"ProfilerStep#{v + dstep}"')
    return out


def copies_for(tpl: Template, target: int) -> int:
    """How many copies of the block make ``target`` events."""
    fixed = len(tpl.before) + len(tpl.after) + len(tpl.meta_events) + len(tpl.spans)
    return max(1, math.ceil((target - fixed) / len(tpl.block)))


def write_rank(job: tuple[Path, int, int, int, Path, int, int]) -> dict[str, Any]:
    src, rank, ranks, copies, out, level, period = job
    t0 = time.perf_counter()
    tpl = Template(load(src))
    tpl.period = period  # every rank's: the ranks' copies stay as aligned as the source's steps
    header = dict(tpl.header)
    info = dict(header.get("distributedInfo") or {})
    source_rank = info.get("rank")
    info.update(rank=rank, world_size=ranks)
    header["distributedInfo"] = info
    head = json.dumps(header)[:-1]
    head = re.sub(r'"\\u0001([^"]*)"', r"\1", head)
    block = [compile_event(e, True) for e in tpl.block]
    once_before = [compile_event(e, False) for e in tpl.before + tpl.meta_events]
    once_after = [compile_event(e, False) for e in tpl.after]
    shift_after = (copies - 1) * tpl.period
    total_ns = tpl.period * copies
    n = 0
    path = out / f"rank-{rank}.json.gz"
    with gzip.open(path, "wt", compresslevel=level, encoding="utf-8") as f:
        f.write(head + ', "traceEvents": [\n')
        first = True
        buf: list[str] = []

        def emit(fmt: str, values: list[str]) -> None:
            nonlocal first, n
            buf.append(("" if first else ",\n") + fmt.format(*values))
            first = False
            n += 1
            if len(buf) >= BATCH:
                f.write("".join(buf))
                buf.clear()

        for fmt, fields in once_before:
            emit(fmt, _fill(fields, 0, 0, 0))
        for k in range(copies):
            dt, did, dstep = k * tpl.period, k * tpl.id_span, k * tpl.step_span
            for fmt, fields in block:
                emit(fmt, _fill(fields, dt, did, dstep))
        for fmt, fields in once_after:
            emit(fmt, _fill(fields, shift_after, 0, 0))
        for e in tpl.spans:  # the profiler's span, over the whole
            e = dict(e)
            end = max(_ns(e["ts"]) + _ns(e.get("dur", 0)), tpl.block_start + total_ns)
            e["dur"] = _RAW + _us(end - _ns(e["ts"]))
            fmt, fields = compile_event(e, False)
            emit(fmt, _fill(fields, 0, 0, 0))
        f.write("".join(buf))
        f.write("\n]}\n")
    return {
        "rank": rank,
        "source": src.name,
        "source_rank": source_rank,
        "events": n,
        "copies": copies,
        "steps": copies * tpl.step_span,
        "period_ms": tpl.period / 1e6,
        "bytes": path.stat().st_size,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="a folder of per-rank Kineto traces, or one trace")
    ap.add_argument("--out", required=True, help="folder to write rank-R.json.gz into (created)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per rank (about)")
    ap.add_argument("--jobs", type=int, default=2, help="ranks written at once")
    ap.add_argument("--level", type=int, default=1, help="gzip level")
    args = ap.parse_args()
    files = sources(args.source)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if len(files) < args.ranks:
        print(
            f"make_big_job: the source has {len(files)} rank(s) for {args.ranks}: rank R repeats source "
            f"{', '.join(f.name for f in files)}[R % {len(files)}], with distributedInfo.rank = R "
            f"and world_size = {args.ranks}",
            file=sys.stderr,
        )
    # one period and one number of copies for every rank: the same steps, as aligned as the source's
    templates = [Template(load(f)) for f in files]
    period = max(t.period for t in templates)
    copies = max(copies_for(t, args.events) for t in templates)
    del templates
    jobs = [(files[r % len(files)], r, args.ranks, copies, out, args.level, period) for r in range(args.ranks)]
    t0 = time.perf_counter()
    with multiprocessing.Pool(max(1, min(args.jobs, args.ranks))) as pool:
        done = pool.map(write_rank, jobs)
    summary = {"source": args.source, "ranks": done, "seconds": round(time.perf_counter() - t0, 1)}
    out.with_name(out.name + ".json").write_text(json.dumps(summary, indent=1))  # beside: not a trace
    for d in done:
        print(
            f"rank {d['rank']} <- {d['source']}: {d['events']:,} events, {d['steps']} steps "
            f"({d['copies']} copies, {d['period_ms']:.1f} ms apart), {d['bytes'] / 1e6:.1f} MB, {d['seconds']} s"
        )
    print(f"{summary['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
