"""Benchmark: exporting the timeline and writing the HTML report of a large profile.

Imports a Kineto trace (default: the 504,712-event H100 fixture) once, then runs each command
REPS times as a user would (``python -m dlscope ...`` in a fresh process; the commands take turns,
so that a change in the machine's load falls on all of them), taking wall time, CPU time
(user + system) and peak RSS of the child. The peer is the floor of the export: gzip level 1 of the
very bytes the export wrote, in this process, with ISA-L (what the export uses) and with zlib.
Writes bench/results/timeline_export.json and prints a Markdown table.

    python bench/timeline_export.py [--trace PATH] [--reps 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
FIXTURE = Path("fixtures") / "gpu" / "h100_gpt12_bf16_40steps.trace.json.gz"
# the shared folder is beside the clone (CI) or beside the worktrees' folder
DEFAULT_TRACE = next(
    (p / "shared" / FIXTURE for p in (HERE.parents[1], HERE.parents[2]) if (p / "shared" / FIXTURE).exists()),
    HERE.parents[1] / "shared" / FIXTURE,
)


def run(args: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of ``python -m dlscope ARGS``."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "dlscope", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"dlscope {' '.join(args)} failed: {err}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dlscope-bench-"))
    prof = work / "p.dlscope"
    imp = run(["import", str(a.trace), "-o", str(prof)])
    cases = {
        "export timeline (.json.gz, 1 file)": ["export", str(prof), "-f", "-o", str(work / "t.json.gz")],
        "export timeline (.json.gz, parts of 150k events)": [
            "export",
            str(prof),
            "-f",
            "-o",
            str(work / "p.json.gz"),
            "--part-events",
            "150000",
        ],
        "export timeline (.json, uncompressed)": ["export", str(prof), "-f", "-o", str(work / "t.json")],
        "HTML report": ["report", str(prof), "-f", "-o", str(work / "r.html")],
    }
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for _ in range(a.reps):
        for name, args in cases.items():
            runs[name].append(run(args))
    results = {
        name: {
            "median_s": statistics.median(r[0] for r in rs),
            "best_s": min(r[0] for r in rs),
            "median_cpu_s": statistics.median(r[2] for r in rs),
            "peak_rss_mib": max(r[1] for r in rs),
        }
        for name, rs in runs.items()
    }
    raw = (work / "t.json").read_bytes()
    from isal import igzip

    t = time.perf_counter()
    igzip.compress(raw, compresslevel=1)
    floor = time.perf_counter() - t
    t = time.perf_counter()
    gzip.compress(raw, compresslevel=1, mtime=0)
    zlib_floor = time.perf_counter() - t
    events = sum(1 for e in json.loads(raw)["traceEvents"] if e["ph"] != "M")
    out = {
        "machine": machine.describe(),
        "trace": a.trace.name,
        "import_s": imp[0],
        "events": events,
        "json_bytes": len(raw),
        "gz_bytes": (work / "t.json.gz").stat().st_size,
        "isal_gzip_level1_of_output_s": floor,
        "gzip_level1_of_output_s": zlib_floor,
        "results": results,
    }
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "timeline_export.json").write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"machine: {out['machine']}\ntrace: {a.trace.name}; import {imp[0]:.2f} s; timeline {events:,} events, "
        f"{len(raw) / 1e6:,.1f} MB JSON, {out['gz_bytes'] / 1e6:,.1f} MB gzipped\n"
    )
    print(
        "| command | median s | best s | median CPU s | peak RSS MiB | x gzip of the output |\n"
        "|---|---:|---:|---:|---:|---:|"
    )
    for name, r in results.items():
        ratio = f"{r['median_s'] / floor:.1f}" if "gz" in name else ""
        print(
            f"| {name} | {r['median_s']:.2f} | {r['best_s']:.2f} | {r['median_cpu_s']:.2f} | "
            f"{r['peak_rss_mib']:.0f} | {ratio} |"
        )
    print(f"| gzip -1 (ISA-L) of the {len(raw) / 1e6:,.0f} MB output alone (in process) | {floor:.2f} | | | | 1.0 |")
    print(f"| gzip -1 (zlib) of the same | {zlib_floor:.2f} | | | | {zlib_floor / floor:.1f} |")


if __name__ == "__main__":
    main()
