"""Benchmark: comparing two traces, `dlscope diff` vs Holistic Trace Analysis's TraceDiff.

Both run the same job in their own fresh process (interpreter start-up and imports included),
alternating, REPS times each: read both traces, then compare ops and kernels by name over every
iteration (HTA: two LabeledTrace + TraceDiff.compare_traces for GPU and for CPU; dlscope: import
both into profiles + ``compare`` without the advice, which also tests the step times, decomposes
them and compares phases, GPU breakdown and counters; and once more with the advice). Wall time is
measured by this script; peak RSS is each child's own ru_maxrss.

    python bench/diff_speed.py [--control DIR --test DIR] [--reps 3] [--hta-python /tmp/htavenv/bin/python]

Default pair: HTA's trace_diff control/test (shared/corpus/hta/trace_diff). Writes
bench/results/diff_speed.json and prints a Markdown table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402

PAIR = HERE.parents[1] / "shared" / "corpus" / "hta" / "trace_diff"

DLSCOPE_JOB = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from dlscope.importers.run import import_files
from dlscope.analysis.core.context import ProfileData
from dlscope.application.diff import diff
a = import_files([sys.argv[1]], sys.argv[3] + "/a.dlscope", force=True)
b = import_files([sys.argv[2]], sys.argv[3] + "/b.dlscope", force=True)
t1 = time.perf_counter()
d = diff(ProfileData.open(a), ProfileData.open(b), with_advice=sys.argv[4] == "1")
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analysis_s": t2 - t1, "kernels": len(d.kernels), "ops": len(d.ops),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA_JOB = r"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
a = LabeledTrace(label="control", trace_dir=sys.argv[1])
b = LabeledTrace(label="test", trace_dir=sys.argv[2])
t1 = time.perf_counter()
n = {}
for kind in ("GPU", "CPU"):
    df = TraceDiff.compare_traces(a, b, control_iteration=a.iterations(), test_iteration=b.iterations(),
                                  device_type=DeviceType[kind])
    n[kind] = len(df)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analysis_s": t2 - t1, "kernels": n["GPU"], "ops": n["CPU"],
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(cmd: list[str]) -> dict:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        raise SystemExit(f"failed: {' '.join(cmd[:3])}...\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--control", default=str(PAIR / "control"))
    ap.add_argument("--test", default=str(PAIR / "test"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--out", default=str(HERE / "results" / "diff_speed.json"))
    args = ap.parse_args()
    work = tempfile.mkdtemp()
    runs: dict[str, list[dict]] = {"dlscope": [], "dlscope_advice": [], "hta": []}
    have_hta = Path(args.hta_python).exists()
    for _ in range(args.reps):
        runs["dlscope"].append(run([sys.executable, "-c", DLSCOPE_JOB, args.control, args.test, work, "0"]))
        if have_hta:
            runs["hta"].append(run([args.hta_python, "-c", HTA_JOB, args.control, args.test]))
        runs["dlscope_advice"].append(run([sys.executable, "-c", DLSCOPE_JOB, args.control, args.test, work, "1"]))
    med = {
        k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "import_s", "analysis_s", "rss_mb")}
        for k, v in runs.items()
        if v
    }
    report = {
        "benchmark": "diff_speed",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine.describe(),
        "control": args.control,
        "test": args.test,
        "reps": args.reps,
        "median": med,
        "runs": runs,
        "command": " ".join(["python", *sys.argv]),
    }
    if "hta" in med:
        report["speedup_wall"] = med["hta"]["wall_s"] / med["dlscope"]["wall_s"]
        report["memory_ratio"] = med["dlscope"]["rss_mb"] / med["hta"]["rss_mb"]
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("| tool | wall s | read s | compare s | peak RSS MB |\n|---|---:|---:|---:|---:|")
    for k, m in med.items():
        print(f"| {k} | {m['wall_s']:.2f} | {m['import_s']:.2f} | {m['analysis_s']:.2f} | {m['rss_mb']:.0f} |")
    if "speedup_wall" in report:
        print(
            f"\ndlscope (no advice) is {report['speedup_wall']:.1f}x faster than HTA and uses "
            f"{100 * report['memory_ratio']:.0f}% of its memory"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
