"""A CPU training loop that reads its loss with ``.item()`` every step, adds it up, keeps it in a list and
prints the mean every 4 steps (argv: the JSON file it writes at the end; PROBE_STEPS, default 12).

What it writes: the type each ``.item()`` returned, the running sum's type before it was printed, the
numbers as the program computed them (``json.dumps`` of the lazy ones) and as ``float(loss)`` read them at
once (a path the defer_sync fix leaves alone), and what ``.tolist()`` and a bool ``.item()`` gave."""

import json
import os
import sys

import torch
from torch import nn

torch.manual_seed(0)
steps = int(os.environ.get("PROBE_STEPS", "12"))
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 8), torch.randn(64, 1)
running, losses, eager, kinds, running_kinds = 0.0, [], [], [], []
for step in range(steps):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    v = loss.item()
    kinds.append(type(v).__name__)
    eager.append(float(loss.detach()))
    running += v
    running_kinds.append(type(running).__name__)
    losses.append(v)
    if step % 4 == 3:
        print(f"step {step} mean loss {running / (step + 1):.6f}", file=sys.stderr)
eager_running = 0.0
for e in eager:
    eager_running += e
out = {
    "kinds": kinds,
    "running_kinds": running_kinds,
    "running": running,
    "eager_running": eager_running,
    "losses": losses,
    "eager": eager,
    "tolist": [type(loss.tolist()).__name__, type(loss.reshape(1).tolist()[0]).__name__],
    "flag": type((loss > 0).item()).__name__,
}
with open(sys.argv[1], "w") as f:
    f.write(json.dumps(out))
