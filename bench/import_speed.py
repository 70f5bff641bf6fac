"""Benchmark: import + summary of a large Kineto trace, dlscope vs Holistic Trace Analysis.

Both run the same job in their own fresh process (interpreter start-up and imports included),
alternating, REPS times each: read the trace, then the summary and the GPU time/kernel
breakdowns (HTA: TraceAnalysis(trace_dir) + get_temporal_breakdown + get_gpu_kernel_breakdown;
dlscope: import + summary + the gpu_time_breakdown and cuda_gpu_kern_sum reports when present).
Wall time is measured by this script; peak RSS is each child's own ru_maxrss.

    python bench/import_speed.py [--trace PATH] [--reps 5] [--hta-python /tmp/htavenv/bin/python]

Writes bench/results/import_speed.json and prints a Markdown table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402

DEFAULT_TRACE = HERE.parents[1] / "shared" / "fixtures" / "gpu" / "h100_gpt12_bf16_40steps.trace.json.gz"

# dlscope's modules load as the CLI loads them: the import path first (DuckDB only), the analysis
# (pyarrow, numpy) when the profile is written.
DLSCOPE_JOB = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from dlscope.importers.run import import_files
out = import_files([sys.argv[1]], sys.argv[2], force=True)
t1 = time.perf_counter()
from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize
data = ProfileData.open(out)
s = summarize(data)
for name in ("gpu_time_breakdown", "cuda_gpu_kern_sum"):
    if name in REPORTS:
        REPORTS[name].compute(data)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analysis_s": t2 - t1, "steps": s.steps.count,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "reports": [n for n in ("gpu_time_breakdown", "cuda_gpu_kern_sum") if n in REPORTS]}))
"""

HTA_JOB = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
a.get_temporal_breakdown(visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analysis_s": t2 - t1,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(cmd: list[str]) -> dict:
    """Run one job; wall time, the child's CPU time (user + system: less sensitive than wall time
    to other jobs on a shared machine) and the load average before it."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        raise SystemExit(f"failed: {' '.join(cmd[:3])}...\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    out["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out["load_before"] = load
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=str(DEFAULT_TRACE))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--out", default=str(HERE / "results" / "import_speed.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    hta_dir = work / "trace_dir"
    hta_dir.mkdir()
    (hta_dir / "rank-0.trace.json.gz").symlink_to(Path(args.trace).resolve())
    runs: dict[str, list[dict]] = {"dlscope": [], "hta": []}
    have_hta = Path(args.hta_python).exists()
    for _ in range(args.reps):
        runs["dlscope"].append(run([sys.executable, "-c", DLSCOPE_JOB, args.trace, str(work / "p.dlscope")]))
        if have_hta:
            runs["hta"].append(run([args.hta_python, "-c", HTA_JOB, str(hta_dir)]))
    med = {
        k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s", "import_s", "analysis_s", "rss_mb")}
        for k, v in runs.items()
        if v
    }
    report = {
        "benchmark": "import_speed",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine.describe(),
        "trace": Path(args.trace).name,
        "reps": args.reps,
        "median": med,
        "runs": runs,
        "command": " ".join(["python", *sys.argv]),
    }
    if "hta" in med:
        report["speedup_wall"] = med["hta"]["wall_s"] / med["dlscope"]["wall_s"]
        report["speedup_cpu"] = med["hta"]["cpu_s"] / med["dlscope"]["cpu_s"]
        report["speedup_wall_per_pair"] = [h["wall_s"] / d["wall_s"] for d, h in zip(runs["dlscope"], runs["hta"])]
        report["memory_ratio"] = med["dlscope"]["rss_mb"] / med["hta"]["rss_mb"]
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("| tool | wall s | CPU s | read s | analysis s | peak RSS MB |\n|---|---:|---:|---:|---:|---:|")
    for k, m in med.items():
        print(
            f"| {k} | {m['wall_s']:.2f} | {m['cpu_s']:.2f} | {m['import_s']:.2f} | {m['analysis_s']:.2f} "
            f"| {m['rss_mb']:.0f} |"
        )
    if "speedup_wall" in report:
        print(
            f"\ndlscope is {report['speedup_wall']:.1f}x faster than HTA in wall time "
            f"({report['speedup_cpu']:.1f}x in CPU time) and uses "
            f"{100 * report['memory_ratio']:.0f}% of its memory (targets: 10x, 33%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
