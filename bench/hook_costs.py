"""Benchmark: what dlscope's phase hooks (capture/torch_hooks.py) cost a training step, and the
two GPU facts the replay stands on (the launch queue's depth, an unblocked launch's cost).

1. Hooks: one process trains a small model (a launch-bound MLP: the worst case, many module
   calls and optimizer ops per ms) in blocks of steps, alternating blocks with the hooks on
   (a recording session holding only the hooks collector) and off; median step per block, the
   difference of the medians is the hooks' cost per step. Same comparison with torch.profiler
   on (CPU+CUDA activities, as dlscope's traced window) for scale.
2. Launch queue (CUDA only): a long kernel (``torch.cuda._sleep``) is queued, then tiny kernels
   are launched one by one, each call timed; the first call that waits (over 20x the median)
   tells how many launches the queue held.

    python bench/hook_costs.py [--device cuda] [--blocks 8] [--steps 200] -o results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlscope.capture.base import Settings  # noqa: E402
from dlscope.capture.session import Session  # noqa: E402
from dlscope.capture.torch_hooks import TorchPhaseHooks  # noqa: E402


def make(device: str):
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
    return model, opt, loader


def block(model, opt, loader, steps: int, device: str) -> float:
    it = iter(loader)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    return (time.perf_counter() - t0) / steps * 1e6  # us per step


def hooks_cost(device: str, blocks: int, steps: int) -> dict:
    model, opt, loader = make(device)
    block(model, opt, loader, 20, device)  # warm up
    times: dict[str, list[float]] = {"off": [], "hooks": [], "torch.profiler": []}
    tmp = Path(tempfile.mkdtemp())
    for b in range(blocks):
        for mode in (["off", "hooks", "torch.profiler"] if b % 2 == 0 else ["torch.profiler", "hooks", "off"]):
            if mode == "hooks":
                s = Session(tmp / f"h{b}.dlscope", Settings(), collectors=[TorchPhaseHooks]).start()
                s.step()  # the first boundary narrows the forward hooks to the outermost modules
                block(model, opt, loader, 5, device)
                s.step()
                times[mode].append(block(model, opt, loader, steps, device))
                s.stop()
            elif mode == "torch.profiler":
                acts = [torch.profiler.ProfilerActivity.CPU] + (
                    [torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
                with torch.profiler.profile(activities=acts):
                    times[mode].append(block(model, opt, loader, steps, device))
            else:
                times[mode].append(block(model, opt, loader, steps, device))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"device": device, "steps_per_block": steps, "blocks": blocks, "us_per_step": times,
            "median_us_per_step": med,
            "hooks_cost_us_per_step": med["hooks"] - med["off"],
            "hooks_cost_pct": 100 * (med["hooks"] / med["off"] - 1),
            "torch_profiler_cost_pct": 100 * (med["torch.profiler"] / med["off"] - 1)}


def launch_queue(n: int = 4096) -> dict:
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    out = {}
    for trial in range(3):
        torch.cuda._sleep(int(2e9))  # about a second of GPU time at ~2 GHz: the queue fills behind it
        costs = []
        for _ in range(n):
            t = time.perf_counter_ns()
            x.add_(1)
            costs.append(time.perf_counter_ns() - t)
        torch.cuda.synchronize()
        med = statistics.median(costs[:256])
        first_wait = next((i for i, c in enumerate(costs) if c > 20 * med), None)
        out[f"trial{trial}"] = {"median_launch_ns": med, "p90_launch_ns": statistics.quantiles(costs[:256], n=10)[-1],
                                "launches_before_first_wait": first_wait}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("-o", "--output", default="")
    a = ap.parse_args()
    res = {"torch": torch.__version__, "hooks": hooks_cost(a.device, a.blocks, a.steps)}
    if a.device == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)
        res["launch_queue"] = launch_queue()
    text = json.dumps(res, indent=1)
    if a.output:
        Path(a.output).write_text(text)
    h = res["hooks"]
    print(f"{a.device}: off {h['median_us_per_step']['off']:.1f} us/step, hooks +{h['hooks_cost_us_per_step']:.1f} us "
          f"({h['hooks_cost_pct']:+.2f}%), torch.profiler {h['torch_profiler_cost_pct']:+.1f}%")
    if "launch_queue" in res:
        print(json.dumps(res["launch_queue"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
