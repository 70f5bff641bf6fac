"""Copy the small part of Holistic Trace Analysis' trace corpus that the tests bundle.

The tests read the whole corpus from ``../shared/corpus/hta/`` where it is (beside the clone);
elsewhere they fall back to this subset, so that a clean clone alone still tests every kind of
trace the corpus holds: CUDA, ROCm, MTIA, CPU-only, multi-rank, rank missing, execution traces,
memory timelines, CUPTI profiler ranges, Triton, event syncs, and nanosecond timestamps.

Every file up to MAX_BYTES is copied as it is. The nanosecond-resolution trace (1.2 MB) is cut
to a window of about EVENTS events *as text* (re-serializing would change how its timestamps
are written, which is what its test is about). From the repository root:

    python tests/data/hta_corpus/make_subset.py ../shared/corpus/hta
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_BYTES = 350_000
EVENTS = 4000
CUT = "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def cut_events(src: Path, dst: Path, n: int) -> None:
    """Write ``src`` with the events of one time window only (about ``n`` of them, from the first
    kernel's launch on, so that launches, kernels and their ops stay together) and every event
    without a time (metadata); each kept event is the source's own text."""
    text = gzip.decompress(src.read_bytes()).decode()
    start = text.index("[", text.index('"traceEvents"')) + 1
    dec = json.JSONDecoder()
    events: list[tuple[float | None, str]] = []
    pos = start
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "]":
            break
        ev, end = dec.raw_decode(text, pos)
        events.append((float(ev["ts"]) if "ts" in ev else None, text[pos:end]))
        pos = end
    first_kernel = min(float(json.loads(raw)["ts"]) for _, raw in events if '"cat": "kernel"' in raw)
    timed = sorted(ts for ts, _ in events if ts is not None and ts >= first_kernel - 1000)
    last = timed[min(n, len(timed)) - 1]
    kept = [raw for ts, raw in events if ts is None or first_kernel - 1000 <= ts <= last]
    out = text[:start] + "\n" + ",\n".join(kept) + "\n" + text[pos:]
    dst.write_bytes(gzip.compress(out.encode(), mtime=0))


def main(corpus: Path) -> None:
    for f in sorted(p for p in corpus.rglob("*") if p.is_file()):
        rel = f.relative_to(corpus)
        dst = HERE / rel
        if f.stat().st_size <= MAX_BYTES:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)
        elif str(rel) == CUT:
            dst.parent.mkdir(parents=True, exist_ok=True)
            cut_events(f, dst, EVENTS)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
