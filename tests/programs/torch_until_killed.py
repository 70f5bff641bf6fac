"""An unmodified PyTorch training loop that runs until killed, saying each finished step."""

import os
import sys

import torch
from torch import nn

print(f"pid {os.getpid()}", flush=True)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
for i in range(10**7):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {i}", flush=True)
sys.exit(0)
