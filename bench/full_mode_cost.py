"""Benchmark (GPU host): what full mode costs a training step, against torch.profiler with the same
options, and what each part of full mode costs alone (issue 39).

The program is the suite's GPT-2-124M-class decoder in bf16 (``advice_truth/train.py --model gpt2
--variant bf16``: an ordinary loop with a DataLoader-free Python tokenizer, AdamW per parameter, a
``.item()`` on the loss each step), ``--skip`` + ``--steps`` steps, each run a fresh process. Per round, alternated (the
order rotates each round):

* ``bare``: the program alone;
* ``torch.profiler``: the same loop inside ``torch.profiler.profile(activities=[CPU, CUDA],
  record_shapes=True, profile_memory=True)`` (the options full mode records), trace exported after;
* ``dlscope full``: ``dlscope profile --mode full -- python train.py ...`` (the program unmodified).

With ``--parts`` each round also runs the loop under dlscope's API with full mode minus one part:
the GPU phase marks (``phase_gpu``), the Python phase hooks (``phase_hooks``), the NVML sampler,
and the spool flushes (flushed every 600 s instead of every second): a part's cost is the full
run's overhead minus that run's.

A run's step time is the median of its steps after the first ``--skip`` (the program times each
step itself; start-up, profiler start and the trace's hand-off are outside the steps). A round's
overhead is each run's step time over the same round's bare run; the paired ratio is dlscope's
overhead over torch.profiler's. The median ratio is reported with a distribution-free upper bound
(the order statistic whose one-sided coverage of the median is at least 95%) and a bootstrap 95%
percentile.

    python3 bench/full_mode_cost.py [--rounds 6] [--steps 60] [--parts] [--budget 540] -o OUT.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "advice_truth" / "train.py"
PARTS = {  # part -> the Settings that leave it out of full mode
    "no GPU marks": {"phase_gpu": False},
    "no phase hooks": {"phase_hooks": False},
    "no NVML sampler": {"nvml": "off"},
    "no spool flushes": {"flush_interval_s": 600.0},
}


def child(args: argparse.Namespace) -> int:
    """One run inside a profiler chosen by ``--under`` (torch, or dlscope's API with Settings)."""
    sys.path.insert(0, str(TRAIN.parent))
    import programs  # the suite's module, beside train.py

    trainer = programs.Trainer(programs.config(args.model, args.variant), args.device)
    times: list[float] = []

    def loop() -> None:
        for _ in range(args.steps):
            s = time.perf_counter()
            trainer.step()
            times.append((time.perf_counter() - s) * 1e3)

    tmp = Path(tempfile.mkdtemp())
    if args.under == "torch":
        from torch.profiler import ProfilerActivity, profile

        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, profile_memory=True
        ) as prof:
            loop()
        prof.export_chrome_trace(str(tmp / "trace.json"))
    else:
        from dlscope.application.record import recording
        from dlscope.capture.base import Settings

        with recording(tmp / "run.dlscope", Settings(mode="full", **json.loads(args.under))):
            loop()
    shutil.rmtree(tmp, ignore_errors=True)
    Path(args.times_out).write_text(json.dumps({"step_ms": times}))
    return 0


def blocks(args: argparse.Namespace) -> int:
    """``--in-process``: one process, one trainer; per round a block of steps bare, one under
    torch.profiler and one under dlscope's full mode (the API: the collectors `dlscope profile`
    starts), alternated, each profiler started before the block's warm-up steps and stopped after
    its last (stop and hand-off outside the steps). Adjacent blocks share the machine's state, so
    its drift cancels in the paired ratio."""
    sys.path.insert(0, str(TRAIN.parent))
    import programs  # the suite's module, beside train.py
    from torch.profiler import ProfilerActivity, profile

    from dlscope.application.record import recording
    from dlscope.capture.base import Settings

    trainer = programs.Trainer(programs.config(args.model, args.variant), args.device)

    def steps() -> float:
        for _ in range(args.skip):
            trainer.step()
        times = []
        for _ in range(args.steps):
            s = time.perf_counter()
            trainer.step()
            times.append((time.perf_counter() - s) * 1e3)
        return statistics.median(times)

    def under_dlscope(overrides: dict[str, object]) -> float:
        tmp = Path(tempfile.mkdtemp())
        try:
            with recording(tmp / "b.dlscope", Settings(mode="full", **overrides)):  # type: ignore[arg-type]
                return steps()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def under_torch() -> float:
        tmp = Path(tempfile.mkdtemp())
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, profile_memory=True
        ) as prof:
            ms = steps()
        prof.export_chrome_trace(str(tmp / "trace.json"))  # as a user would, after the steps
        shutil.rmtree(tmp, ignore_errors=True)
        return ms

    configs = {"bare": steps, "torch.profiler": under_torch, "dlscope full": lambda: under_dlscope({})}
    if args.parts:
        configs.update({p: (lambda o=o: under_dlscope(o)) for p, o in PARTS.items()})
    kinds = list(configs)
    for fn in configs.values():  # one untimed block each: CUPTI, allocator and clocks warm up
        fn()
    return rounds(args, kinds, lambda k: configs[k]())


def rounds(args: argparse.Namespace, kinds: list[str], measure: Callable[[str], float | None]) -> int:
    """Run ``measure`` on every kind per round, the order rotating, within the budget; write the
    summary."""
    t0 = time.monotonic()
    runs: dict[str, list[float | None]] = {k: [] for k in kinds}
    round_s: list[float] = []
    for r in range(args.rounds):
        left = args.budget - (time.monotonic() - t0)
        if round_s and left < 1.2 * max(round_s):
            print(f"round {r}: skipped, {left:.0f} s left", flush=True)
            break
        start = time.monotonic()
        for k in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
            med = measure(k)
            runs[k].append(med)
            print(f"round {r} {k}: {med if med is None else round(med, 2)} ms/step", flush=True)
        round_s.append(time.monotonic() - start)
    result = summarize(runs, kinds)
    result.update(
        rounds_done=len(round_s), round_s=round_s, steps=args.steps, skip=args.skip, in_process=args.in_process
    )
    try:
        import torch

        result["device"] = torch.cuda.get_device_name(0)
        result["torch"] = torch.__version__
    except Exception:  # noqa: BLE001 - a description only
        pass
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "runs_ms"}, indent=1))
    return 0


MODEL = ["gpt2", "bf16"]  # the processes' program (main() sets it from the flags)


def run_one(kind: str, steps: int, limit: float) -> list[float] | None:
    """One run of configuration ``kind`` in a fresh process; its step times (ms), or None."""
    tmp = Path(tempfile.mkdtemp())
    times = tmp / "times.json"
    prog = [sys.executable, str(TRAIN), "--model", MODEL[0], "--variant", MODEL[1], "--steps", str(steps)]
    prog += ["--times-out", str(times)]
    me = [sys.executable, __file__, "child", "--steps", str(steps), "--times-out", str(times)]
    if kind == "bare":
        cmd = prog
    elif kind == "torch.profiler":
        cmd = [*me, "--under", "torch"]
    elif kind == "dlscope full":
        cmd = [sys.executable, "-m", "dlscope", "profile", "--mode", "full", "-q", "-f", "-o", str(tmp / "p.dlscope")]
        cmd += ["--", *prog]
    elif kind == "dlscope full (API)":
        cmd = [*me, "--under", "{}"]
    else:
        cmd = [*me, "--under", json.dumps(PARTS[kind])]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        print(f"  {kind}: timed out after {limit:.0f} s", flush=True)
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    out = json.loads(times.read_text())["step_ms"] if times.exists() else None
    shutil.rmtree(tmp, ignore_errors=True)
    if r.returncode or out is None:
        print(f"  {kind}: rc={r.returncode} {r.stderr.strip()[-400:]}", flush=True)
        return None
    return out


def upper_bound_of_median(values: list[float], coverage: float = 0.95) -> float | None:
    """The smallest order statistic x(k) with P(median <= x(k)) >= coverage, by the binomial
    (distribution-free): None when the sample is too small for that coverage."""
    xs, n = sorted(values), len(values)
    for k in range(1, n + 1):  # P(at least n-k+1 of n values above the median) ... the sign test
        if sum(math.comb(n, j) for j in range(k)) / 2**n >= coverage:
            return xs[k - 1]
    return None


def bootstrap_upper(values: list[float], coverage: float = 0.95, draws: int = 10000) -> float:
    rng = random.Random(39)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(draws))
    return meds[min(draws - 1, int(coverage * draws))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="bench", choices=("bench", "child"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--skip", type=int, default=10, help="steps left out of each run's median (warm-up)")
    ap.add_argument("--parts", action="store_true", help="also full mode minus each part, through the API")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds: no round starts that may not finish")
    ap.add_argument("-o", "--output", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "full_mode_cost.json")
    ap.add_argument("--model", default="gpt2", help="the suite's model (a smoke test on the CPU: mlp)")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--in-process", action="store_true", help="blocks of steps alternated in one process")
    ap.add_argument("--under", default="torch")
    ap.add_argument("--times-out", default="")
    args = ap.parse_args()
    if args.mode == "child":
        return child(args)
    MODEL[:] = [args.model, args.variant]
    if args.in_process:
        return blocks(args)
    kinds = ["bare", "torch.profiler", "dlscope full"]
    if args.parts:
        kinds += ["dlscope full (API)", *PARTS]
    t0 = time.monotonic()

    def measure(kind: str) -> float | None:
        times = run_one(kind, args.skip + args.steps, max(30.0, args.budget - (time.monotonic() - t0)))
        return statistics.median(times[args.skip :]) if times and len(times) > args.skip else None

    return rounds(args, kinds, measure)


def summarize(runs: dict[str, list[float | None]], kinds: list[str]) -> dict[str, object]:
    """Per configuration its overheads per round (against that round's bare run), and the paired
    ratio of dlscope's overhead to torch.profiler's."""
    bare = runs["bare"]
    over: dict[str, list[float | None]] = {}
    for k in kinds[1:]:
        over[k] = [100 * (v / b - 1) if v is not None and b else None for v, b in zip(runs[k], bare)]
    ratios = [
        d / t for d, t in zip(over["dlscope full"], over["torch.profiler"]) if d is not None and t is not None and t > 0
    ]
    out: dict[str, object] = {"runs_ms": runs, "overhead_pct": over}
    out["median_overhead_pct"] = {
        k: statistics.median([x for x in v if x is not None]) for k, v in over.items() if any(x is not None for x in v)
    }
    if ratios:
        out["ratio_dlscope_to_torch_profiler"] = ratios
        out["ratio_median"] = statistics.median(ratios)
        out["ratio_upper95_order_statistic"] = upper_bound_of_median(ratios)
        out["ratio_upper95_bootstrap"] = bootstrap_upper(ratios)
    if any(p in over for p in PARTS):
        full = over.get("dlscope full (API)") or over["dlscope full"]  # in one process: the API's run
        out["part_cost_pct"] = {
            p: statistics.median(
                [f - x for f, x in zip(full, over[p]) if f is not None and x is not None] or [float("nan")]
            )
            for p in PARTS
        }
    return out


if __name__ == "__main__":
    sys.exit(main())
