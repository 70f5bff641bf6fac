"""Untraced step time of a model's baseline and of each single-fix variant, measured in one
process, alternated: every round times one block of steps of each variant in a rotated order, so
slow drifts (clocks, temperature, the page cache) hit all variants alike.

    python bench/advice_truth/measure.py --model cnn [--rounds 5] [--block 10] -o cnn.json

Every variant except a compiled one is built afresh for each block (one model alive at a time). A
block's time is wall time over ``--block`` steps closed by a device synchronize, divided by the
steps (the mean step, as a training loop sees it: steps that do not synchronize overlap with the
next one). The result per variant: the median over rounds, the spread (min..max over rounds) as
the noise, and for ``batch2x`` the time per sample. ``saving_pct`` is relative to the baseline,
per sample.

Each step's own wall time is kept too (``steps_ms``; meaningful for variants that synchronize every
step, as every ``.item()``-per-step variant does): ``median_step_ms`` is the median over all timed
steps of all rounds and ``median_saving_pct`` its saving, the statistic ``dlscope try`` reports
(the median untraced step), for comparing the two (``try_vs_measure.py``).

    --variants workers_fix,workers    any variants of programs.config, e.g. the try-fix ones
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import programs  # noqa: E402


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(
    model: str,
    rounds: int,
    block: int,
    warmup: int,
    device: str = "cuda",
    variants: list[str] | None = None,
    on_round=None,
) -> dict:
    """Per variant, the summary of :func:`summarize`; ``on_round(summary)`` after every round (so a
    run stopped by a time limit keeps the rounds it finished)."""
    names = ["baseline", *(variants or programs.MODEL_FIXES[model])]
    # torch.compile caches per code object: a compiled variant is built once and kept (rebuilding it
    # would recompile every round); every other variant is built fresh for each block, so only one
    # model, optimizer and DataLoader is alive while a block is timed, as in the real program
    kept = {v: programs.build(model, v, device) for v in names if programs.config(model, v).compile}
    times: dict[str, list[float]] = {v: [] for v in names}
    steps: dict[str, list[float]] = {v: [] for v in names}
    if block <= 0:  # about a second of baseline steps per block: short steps need many to average out
        probe = programs.build(model, "baseline", device)
        for _ in range(warmup + 3):
            probe.step()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(5):
            probe.step()
        sync(device)
        block = max(12, min(200, int(1.0 / ((time.perf_counter() - t0) / 5))))
        del probe
        gc.collect()
        print(f"  {model}: {block} steps per block", flush=True)
    out: dict = {}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for v in order:
            t = kept.get(v) or programs.build(model, v, device)
            for _ in range(warmup):
                t.step()
            sync(device)
            t0 = s0 = time.perf_counter()
            for _ in range(block):
                t.step()
                s1 = time.perf_counter()
                steps[v].append((s1 - s0) * 1e3)
                s0 = s1
            sync(device)
            times[v].append((time.perf_counter() - t0) / block * 1e3)
            if v not in kept:
                del t
                gc.collect()
        print(f"  {model}: round {r + 1}/{rounds} done", flush=True)
        out = summarize(model, names, times, steps, block)
        if on_round is not None:
            on_round(out)
    for v, o in out.items():
        print(
            f"  {model}/{v}: {o['step_ms']:.2f} ms/step (IQR {o['iqr_pct']:.1f}%), "
            f"saving {o['saving_pct']:.1f}%; median step {o['median_step_ms']:.2f} ms, "
            f"saving {o['median_saving_pct']:.1f}%",
            flush=True,
        )
    return out


def summarize(
    model: str, names: list[str], times: dict[str, list[float]], steps: dict[str, list[float]], block: int
) -> dict:
    base_per_sample = statistics.median(times["baseline"]) / programs.samples(model, "baseline")
    base_step = statistics.median(steps["baseline"]) / programs.samples(model, "baseline")
    out = {}
    for v in names:
        med = statistics.median(times[v])
        per_sample = med / programs.samples(model, v)
        q = statistics.quantiles(times[v], n=4) if len(times[v]) >= 4 else [min(times[v]), med, max(times[v])]
        out[v] = {
            "step_ms": med,
            "rounds_ms": times[v],
            "iqr_pct": 100 * (q[-1] - q[0]) / med,
            "noise_pct": 100 * (max(times[v]) - min(times[v])) / med,
            "samples": programs.samples(model, v),
            "saving_pct": 100 * (1 - per_sample / base_per_sample),
            "saving_ms": (base_per_sample - per_sample) * programs.samples(model, "baseline"),
            "block_steps": block,
            "median_step_ms": statistics.median(steps[v]),
            "mean_step_ms": statistics.fmean(steps[v]),
            "median_saving_pct": 100 * (1 - statistics.median(steps[v]) / programs.samples(model, v) / base_step),
            "steps_ms": [round(x, 3) for x in steps[v]],
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=int, default=0, help="steps per block; 0: about 1 s of baseline steps")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--variants",
        default="",
        help=(
            "comma-separated variants (default: the model's suite fixes); "
            "any of programs.config's, e.g. workers_fix, compile_graphs_fix, bf16_fix"
        ),
    )
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args()
    for v in (v for v in a.variants.split(",") if v):
        try:
            programs.config(a.model, v)
        except KeyError as e:
            p.error(str(e))
    res: dict = {
        "model": a.model,
        "method": "fresh variant per block",
        "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "rounds": a.rounds,
        "block": a.block,
        "rounds_done": 0,
    }

    def write(variants: dict) -> None:
        res["variants"] = variants
        res["rounds_done"] += 1
        Path(a.output).write_text(json.dumps(res, indent=1))

    measure(a.model, a.rounds, a.block, a.warmup, a.device, [v for v in a.variants.split(",") if v] or None, write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
