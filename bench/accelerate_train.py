"""A balanced MLP trained with Hugging Face Accelerate, as its documentation writes one, for
``dlscope profile -- accelerate launch --multi_gpu --num_processes 2 bench/accelerate_train.py``.

Every rank does the same work; the loss is logged every 20 steps (the host never blocks on the GPU
in between, so the straggler analysis must read the GPU's own waits). Issue 21 saw a CRITICAL
straggler on such a job.
"""

from __future__ import annotations

import argparse

import torch
from accelerate import Accelerator
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    a = ap.parse_args()
    acc = Accelerator()
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(1024, 1024), nn.GELU()]
    model = nn.Sequential(*layers, nn.Linear(1024, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256 * 64, 1024, generator=g),
                                          torch.randint(0, 10, (256 * 64,), generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    step = 0
    while step < a.steps:
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            acc.backward(loss)
            opt.step()
            step += 1
            if step % 20 == 0:
                acc.print(f"step {step}: loss {loss.item():.4f}")
            if step >= a.steps:
                break


if __name__ == "__main__":
    main()
