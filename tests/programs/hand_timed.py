"""A training loop that times its own phases with perf_counter_ns (argv: steps, output JSON), so the
hooks' phases can be checked against hand-timed ones."""

import json
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 16 * 40

    def __getitem__(self, i: int):
        t = time.perf_counter() + 0.0001
        while time.perf_counter() < t:
            pass
        return torch.randn(32), i % 4


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
opt = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=False)
it = iter(DataLoader(Slow(), batch_size=16))
rec = []
now = time.perf_counter_ns
for _ in range(int(sys.argv[1])):
    a = now()
    x, y = next(it)
    b = now()
    out = model(x)
    c = now()
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    d = now()
    loss.backward()
    e = now()
    opt.step()
    f = now()
    rec.append({"dataloader": [a, b], "forward": [b, c], "backward": [d, e], "optimizer": [e, f]})
with open(sys.argv[2], "w") as fh:
    json.dump(rec, fh)
