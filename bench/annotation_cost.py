"""Benchmark: cost of one phase enter+exit, dlscope vs the annotations people use today.

Side by side in one process: dlscope's ``prof.phase`` (recording), ``dlscope.phase`` (recording,
and with no profile active), ``torch.profiler.record_function`` (with no profiler, and inside an
active CPU torch.profiler), the ``nvtx`` package's ``annotate`` and ``torch.cuda.nvtx`` push/pop
(where available). Each is timed as the best of REPS runs of N ``with`` blocks, minus the empty
loop. Writes bench/results/annotation_cost.json and prints a Markdown table.

    python bench/annotation_cost.py [--n 200000] [--reps 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from time import perf_counter_ns

import dlscope

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

BUDGET_NS = 500


def per_call_ns(body: Callable[[int], None], n: int, reps: int) -> tuple[float, float]:
    """(best, median) ns per iteration over ``reps`` runs of ``body(n)``."""
    times = []
    for _ in range(reps):
        t = perf_counter_ns()
        body(n)
        times.append((perf_counter_ns() - t) / n)
    return min(times), statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "annotation_cost.json"))
    args = ap.parse_args()
    n, reps = args.n, args.reps

    def empty(k: int) -> None:
        for _ in range(k):
            pass

    cases: dict[str, Callable[[int], None]] = {}
    results: dict[str, dict[str, float]] = {}
    base_best, base_med = per_call_ns(empty, n, reps)

    def inactive(k: int) -> None:
        for _ in range(k):
            with dlscope.phase("x"):
                pass

    cases["dlscope.phase, no profile active"] = inactive
    tmp = Path(tempfile.mkdtemp())
    with dlscope.profile(tmp / "bench.dlscope", torch="off", nvml="off", cupti="off") as prof:

        def recording(k: int, prof=prof) -> None:
            for _ in range(k):
                with prof.phase("x"):
                    pass

        def recording_module(k: int) -> None:
            for _ in range(k):
                with dlscope.phase("x"):
                    pass

        for name, fn in (("dlscope prof.phase, recording", recording), ("dlscope.phase, recording", recording_module)):
            best, med = per_call_ns(fn, n, reps)
            results[name] = {"best_ns": best - base_best, "median_ns": med - base_med}
    best, med = per_call_ns(inactive, n, reps)
    results["dlscope.phase, no profile active"] = {"best_ns": best - base_best, "median_ns": med - base_med}
    # hardware layer: phases also emitted as NVTX ranges (nvtx=True; no NVTX tool attached here)
    try:
        import nvtx  # noqa: F401

        with dlscope.profile(tmp / "nvtx.dlscope", torch="off", nvml="off", cupti="off", nvtx=True) as prof:

            def recording_nvtx(k: int, prof=prof) -> None:
                for _ in range(k):
                    with prof.phase("x"):
                        pass

            best, med = per_call_ns(recording_nvtx, n, reps)
            results["dlscope prof.phase, recording, nvtx=True"] = {
                "best_ns": best - base_best,
                "median_ns": med - base_med,
            }
    except ImportError:
        results["dlscope prof.phase, recording, nvtx=True"] = {"unavailable": "nvtx not installed"}  # type: ignore[dict-item]

    try:
        import torch
        from torch.profiler import ProfilerActivity, profile, record_function

        def rf(k: int) -> None:
            for _ in range(k):
                with record_function("x"):
                    pass

        small = max(n // 10, 1000)
        best, med = per_call_ns(rf, small, reps)
        results["torch record_function, no profiler"] = {"best_ns": best - base_best, "median_ns": med - base_med}
        with profile(activities=[ProfilerActivity.CPU]):
            best, med = per_call_ns(rf, small, reps)
        results["torch record_function, CPU profiler active"] = {
            "best_ns": best - base_best,
            "median_ns": med - base_med,
        }
        try:
            torch.cuda.nvtx.range_push("x")
            torch.cuda.nvtx.range_pop()

            def tnvtx(k: int) -> None:
                push, pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
                for _ in range(k):
                    push("x")
                    pop()

            best, med = per_call_ns(tnvtx, n, reps)
            results["torch.cuda.nvtx push+pop"] = {"best_ns": best - base_best, "median_ns": med - base_med}
        except Exception as e:
            results["torch.cuda.nvtx push+pop"] = {"unavailable": str(e)}  # type: ignore[dict-item]
    except ImportError:
        pass
    try:
        import nvtx

        def nv(k: int) -> None:
            for _ in range(k):
                with nvtx.annotate("x"):
                    pass

        best, med = per_call_ns(nv, n, reps)
        results["nvtx.annotate (nvtx package)"] = {"best_ns": best - base_best, "median_ns": med - base_med}
    except ImportError:
        results["nvtx.annotate (nvtx package)"] = {"unavailable": "nvtx not installed"}  # type: ignore[dict-item]

    ref = results["dlscope prof.phase, recording"]["median_ns"]
    report = {
        "benchmark": "annotation_cost",
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine.describe(),
        "python": sys.version.split()[0],
        "command": " ".join(["python", *sys.argv]),
        "n": n,
        "reps": reps,
        "budget_ns": BUDGET_NS,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("| annotation | best ns | median ns | x dlscope prof.phase |\n|---|---:|---:|---:|")
    for name, r in results.items():
        if "median_ns" in r:
            print(f"| {name} | {r['best_ns']:.0f} | {r['median_ns']:.0f} | {r['median_ns'] / ref:.2f} |")
        else:
            print(f"| {name} | unavailable: {r['unavailable']} | | |")
    ok = ref <= BUDGET_NS
    print(f"\nbudget: prof.phase enter+exit <= {BUDGET_NS} ns: {'met' if ok else 'MISSED'} ({ref:.0f} ns median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
