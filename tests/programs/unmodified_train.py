"""A training script that knows nothing of dlscope: DataLoader, forward, backward, optimizer."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
data = TensorDataset(torch.randn(16 * steps, 32), torch.randint(0, 4, (16 * steps,)))
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(data, batch_size=16):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"done {loss.item():.4f}")
print("to stderr too", file=sys.stderr)
