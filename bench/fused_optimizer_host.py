"""The host time a fused optimizer step keeps, against the per-parameter loop, on a GPU, for a model
that none of the advice suite's programs uses: where unfused_optimizer's ``FUSED_HOST_SHARES`` come
from (bench/optimizer_dispatch.py only brackets them, on the CPU). Run on an H100 on 2026-11-27.

    python3 bench/fused_optimizer_host.py --device cuda [--layers 12] [--width 256] [--reps 5]

PyTorch's ``nn.TransformerEncoder``; each step runs forward and backward, then times
``optimizer.step()`` alone on the host (``time.perf_counter`` around the call, no synchronization:
the host's own work, launches included, as dlscope's optimizer phase times it). AdamW, Adam and SGD
(momentum), each as the per-parameter loop (``foreach=False``), foreach and fused, alternated
``--reps`` times; the median step of each run, then the median over the runs. The GPU is drained
before each step so that a full launch queue does not hold up the step being timed. Prints one JSON
line with each optimizer's fused/loop and foreach/loop shares.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn


def step_host_ms(
    cls: type[torch.optim.Optimizer], kind: str, model: nn.Module, x: torch.Tensor, steps: int, device: str
) -> float:
    extra = {"momentum": 0.9} if cls is torch.optim.SGD else {}
    how = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[kind]
    opt = cls(model.parameters(), lr=1e-4, **how, **extra)
    times = []
    for i in range(steps + 3):
        model(x).float().square().mean().backward()
        if device == "cuda":
            torch.cuda.synchronize()  # an empty queue: the step's launches do not wait for room
        t0 = time.perf_counter()
        opt.step()
        dt = time.perf_counter() - t0
        opt.zero_grad(set_to_none=True)
        if i >= 3:  # the first steps create the optimizer's state
            times.append(dt * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(a.width, 8, 4 * a.width, batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False).to(a.device)
    x = torch.randn(4, 32, a.width, device=a.device)
    params = sum(1 for _ in model.parameters())
    out: dict[str, object] = {
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "parameters": params,
        "reps": a.reps,
    }
    for cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD):
        runs: dict[str, list[float]] = {"loop": [], "foreach": [], "fused": []}
        for _ in range(a.reps):
            for kind in runs:
                runs[kind].append(step_host_ms(cls, kind, model, x, a.steps, a.device))
        med = {k: statistics.median(v) for k, v in runs.items()}
        out[cls.__name__] = {
            "host_ms": {k: round(v, 3) for k, v in med.items()},
            "fused_over_loop": round(med["fused"] / med["loop"], 4),
            "foreach_over_loop": round(med["foreach"] / med["loop"], 4),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
