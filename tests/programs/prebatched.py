"""A loader that does no batching of its own (DataLoader(batch_size=None)): its dataset yields
whole batches of 5 samples, as a dataset reading pre-batched shards does."""

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(5, 32, generator=g), "y": torch.randint(0, 4, (5,), generator=g)}


torch.manual_seed(0)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in DataLoader(Shards(steps), batch_size=None):
    loss = nn.functional.cross_entropy(model(batch["x"]), batch["y"])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"done {loss.item():.4f}")
