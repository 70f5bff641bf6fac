"""A balanced MLP trained with Hugging Face Accelerate, as its documentation writes one, for
``dlscope profile -- accelerate launch --multi_gpu --num_processes 2 bench/accelerate_train.py``.

Every rank does the same work; the loss is logged every 20 steps (the host never blocks on the GPU
in between, so the straggler analysis must read the GPU's own waits). Issue 21 saw a CRITICAL
straggler on such a job.

``--times-out PREFIX`` writes each rank's own host time per step and phase (``next()`` of the
loader, forward with the loss, backward, optimizer; ``time.perf_counter``, nothing synchronized)
to ``PREFIX.rankN.json``: the same job's per-rank times with and without ``dlscope profile``, to
tell a rank that is slower by itself from one the profiler slows.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from accelerate import Accelerator
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--times-out", metavar="PREFIX")
    a = ap.parse_args()
    acc = Accelerator()
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(256 * 64, 1024, generator=g), torch.randint(0, 10, (256 * 64,), generator=g)
    )
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    step = 0
    phases: dict[str, list[float]] = {"loader": [], "forward": [], "backward": [], "optimizer": [], "step": []}
    clock = time.perf_counter
    while step < a.steps:
        batches = iter(loader)
        while step < a.steps:
            t0 = clock()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            t1 = clock()
            loss = nn.functional.cross_entropy(model(x), y)
            t2 = clock()
            opt.zero_grad(set_to_none=True)
            acc.backward(loss)
            t3 = clock()
            opt.step()
            t4 = clock()
            step += 1
            if step % 20 == 0:
                acc.print(f"step {step}: loss {loss.item():.4f}")
            for name, d in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, clock() - t0)):
                phases[name].append(d * 1e3)
    if a.times_out:
        with open(f"{a.times_out}.rank{acc.process_index}.json", "w") as f:
            json.dump({"rank": acc.process_index, "ms": phases}, f)


if __name__ == "__main__":
    main()
