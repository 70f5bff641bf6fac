"""A small PyTorch training loop on the CPU, annotated with dlscope's three phases.

Run it under the profiler:  dlscope profile --batch-size 64 -- python examples/train_cpu.py
or on its own (it then writes train_cpu.dlscope itself).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import dlscope


class Images(Dataset):
    """Random 32x32 RGB images as uint8 HWC arrays (as a decoder would give them) with labels."""

    def __init__(self, n: int) -> None:
        rng = np.random.default_rng(0)
        self.x = rng.integers(0, 255, size=(n, 32, 32, 3), dtype=np.uint8)
        self.y = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.x[i], int(self.y[i])


MEAN = np.array([0.49, 0.48, 0.45], np.float32)
STD = np.array([0.25, 0.24, 0.26], np.float32)


def preprocess(images: torch.Tensor) -> torch.Tensor:
    """uint8 NHWC -> normalized float NCHW, on the CPU with numpy (a typical input pipeline)."""
    x = (images.numpy().astype(np.float32) / 255.0 - MEAN) / STD
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 128),
        nn.ReLU(),
        nn.Linear(128, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loader = DataLoader(Images(args.batch_size * args.steps), batch_size=args.batch_size, shuffle=True)
    with dlscope.profile("train_cpu.dlscope", batch_size=args.batch_size) as prof:
        for step, (images, labels) in enumerate(loader):
            with prof.phase("preprocess"):
                x = preprocess(images)
            with prof.phase("run"):
                loss = nn.functional.cross_entropy(model(x), labels)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            with prof.phase("postprocess"):
                value = loss.item()
                if step % 10 == 0:
                    print(f"step {step:3d}  loss {value:.3f}")
            prof.step()


if __name__ == "__main__":
    main()
