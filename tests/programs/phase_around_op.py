"""A dlscope phase around one torch op: the op must lie inside the phase (clock alignment)."""

import torch

import dlscope

x = torch.randn(512, 512)
with dlscope.profile("aligned.dlscope") as prof:
    for _ in range(3):
        with prof.phase("matmul_phase"):
            y = torch.mm(x, x)
        prof.step()
