"""A held-out program: never used to build or tune dlscope's advice, run once to check it.

A small Vision Transformer trained the way a user would write it from a tutorial: a Dataset that
makes and normalises each image with torch CPU ops, a DataLoader without workers, AdamW with its
defaults (foreach on CUDA), a cosine schedule stepped every iteration, the loss logged every 10
steps. Each flag is one change a user could make in the source:

    python3 bench/heldout/vit_train.py --steps 40 [--bf16] [--workers 6] [--tf32] [--fused] [--times-out F]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from torch import nn

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class SyntheticImages(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i % 4096)
        img = torch.randint(0, 256, (3, 240, 240), generator=g, dtype=torch.uint8)
        top, left = (i * 7) % 16, (i * 13) % 16
        x = img[:, top : top + 224, left : left + 224].float().div(255)
        x = (x - MEAN) / STD
        if i % 2:
            x = x.flip(-1)
        return x, i % 1000


class ViT(nn.Module):
    def __init__(self, dim: int = 384, depth: int = 8, heads: int = 6, patch: int = 16, classes: int = 1000) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, (224 // patch) ** 2 + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--fused", action="store_true")
    p.add_argument("--times-out", default="")
    a = p.parse_args()
    if a.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    model = ViT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, **({"fused": True} if a.fused else {}))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, 1000) / 1000)))
    loader = torch.utils.data.DataLoader(
        SyntheticImages(),
        batch_size=a.batch,
        num_workers=a.workers,
        pin_memory=a.workers > 0,
        persistent_workers=a.workers > 0,
    )
    crit = nn.CrossEntropyLoss()
    times = []
    it = iter(loader)
    for step in range(a.steps):
        t = time.perf_counter()
        x, y = next(it)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.bf16):
            loss = crit(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
        times.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    if a.times_out:
        Path(a.times_out).write_text(json.dumps({"step_ms": times, "batch": a.batch}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
