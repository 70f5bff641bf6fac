"""Benchmark: every registered report on a large stored profile.

Imports the 504,712-event Kineto trace of GPT (12 layers, bf16, 40 steps on an H100) once, then
times each report of ``dlscope.analysis.REPORTS`` (and the summary's headline) in-process on the
stored profile: best of REPS runs, one opened profile. Writes bench/results/reports_speed.json
and prints a Markdown table. The machine may be shared: the load average is recorded with the
numbers.

    python bench/reports_speed.py [--trace PATH] [--reps 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.headline import headline
from dlscope.importers.run import import_files

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

BUDGET_S = 0.5
TRACE = "fixtures/gpu/h100_gpt12_bf16_40steps.trace.json.gz"


def find_trace() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / TRACE).exists():
            return parent / "shared" / TRACE
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", default=None, help=f"default: shared/{TRACE} beside the clone")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "reports_speed.json"))
    args = ap.parse_args()
    trace = Path(args.trace) if args.trace else find_trace()
    if trace is None or not trace.exists():
        print(f"dlscope bench: {args.trace or 'shared/' + TRACE} not found", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        path = import_files([trace], Path(tmp) / "p.dlscope")
        import_s = time.perf_counter() - t
        data = ProfileData.open(path)
        rows = {name: data.count(name) for name in ("ops", "api", "kernels", "memcpy", "memset", "phases")}
        jobs = {name: lambda rep=rep: rep.compute(data) for name, rep in REPORTS.items() if not rep.missing(data)}
        jobs["summary headline"] = lambda: headline(data)
        results = {}
        for name, job in jobs.items():
            times = []
            for _ in range(args.reps):
                t = time.perf_counter()
                job()
                times.append(time.perf_counter() - t)
            results[name] = {"best_s": min(times), "all_s": times}
        data.close()
    load_after = os.getloadavg()
    out = {
        "benchmark": "reports_speed",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine.describe(),
        "command": "python bench/reports_speed.py",
        "trace": trace.name,
        "profile_rows": rows,
        "import_s": import_s,
        "reps": args.reps,
        "budget_s": BUDGET_S,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"{trace.name}: {sum(rows.values()):,} rows, imported in {import_s:.1f} s; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} CPUs)\n"
    )
    print(f"| report | best of {args.reps}, s | budget |")
    print("|---|---:|---|")
    for name, r in results.items():
        print(f"| {name} | {r['best_s']:.3f} | {'ok' if r['best_s'] <= BUDGET_S else 'OVER'} |")
    return 0 if all(r["best_s"] <= BUDGET_S for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
