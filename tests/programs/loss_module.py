"""A training loop whose loss is a module (``criterion = nn.CrossEntropyLoss()``), timing the model
call and the loss call itself with perf_counter_ns (argv: steps, output JSON): the hooks' forward
must be one per step and span both."""

import json
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 4))
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
rec = []
now = time.perf_counter_ns
for _ in range(int(sys.argv[1])):
    a = now()
    out = model(x)
    b = now()
    loss = criterion(out, y)
    c = now()
    opt.zero_grad()
    loss.backward()
    opt.step()
    rec.append({"model": [a, b], "loss": [b, c]})
with open(sys.argv[2], "w") as fh:
    json.dump(rec, fh)
