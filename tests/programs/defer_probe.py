"""A training loop that reads its loss with ``.item()`` every step, adds it up, keeps it in a list and
prints the mean every few steps (argv: the JSON file it writes at the end).

Environment: PROBE_STEPS (default 12), PROBE_PRINT_EVERY (default 4), PROBE_DEVICE (default cpu; on a GPU,
cuda: an MLP of PROBE_DEPTH (8) layers of PROBE_WIDTH (1024) over a batch of PROBE_BATCH (1024), whose
GPU time and launches are of a size, so that a sync every step costs the step), PROBE_NAN_CHECK=1 (the
program checks each loss for NaN at once: control flow on the number, which defer_sync must keep, and
so waits every step as before), PROBE_HOST_MS (default 0: each step first spends this long in Python on
the training thread, as a batch made by the program would: the host work a sync every step keeps from
running under the GPU's).

What it writes: the type each ``.item()`` returned, the running sum's type before it was printed, the
numbers as the program computed them (``json.dumps`` of the lazy ones) and as ``float()`` of the loss
tensors read them at the end (a path the defer_sync fix leaves alone), and what ``.tolist()`` and a bool
``.item()`` gave."""

import json
import math
import os
import sys
import time

import torch
from torch import nn

torch.manual_seed(0)
steps = int(os.environ.get("PROBE_STEPS", "12"))
every = int(os.environ.get("PROBE_PRINT_EVERY", "4"))
device = os.environ.get("PROBE_DEVICE", "cpu")
if device == "cpu":
    model, x, y = nn.Linear(8, 1), torch.randn(64, 8), torch.randn(64, 1)
else:
    width, depth, batch = (
        int(os.environ.get(k, d)) for k, d in (("PROBE_WIDTH", "1024"), ("PROBE_DEPTH", "8"), ("PROBE_BATCH", "1024"))
    )
    model = nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())], nn.Linear(width, 1))
    model = model.to(device)
    x, y = torch.randn(batch, width, device=device), torch.randn(batch, 1, device=device)
opt = torch.optim.SGD(model.parameters(), lr=0.05 if device == "cpu" else 1e-4)
running, losses, eager_t, kinds, running_kinds = 0.0, [], [], [], []
host_s = float(os.environ.get("PROBE_HOST_MS", "0")) / 1000


def host_work() -> None:
    """The next batch made in Python (busy, holding the GIL, as a tokenizer would)."""
    end, acc = time.perf_counter() + host_s, 0
    while time.perf_counter() < end:
        acc += sum(range(200))


for step in range(steps):
    if host_s:
        host_work()
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    v = loss.item()
    if os.environ.get("PROBE_NAN_CHECK") and math.isnan(v):
        raise FloatingPointError("loss is NaN")
    kinds.append(type(v).__name__)
    eager_t.append(loss.detach())  # read at the end: reading here would wait every step
    running += v
    running_kinds.append(type(running).__name__)
    losses.append(v)
    if step % every == every - 1:
        print(f"step {step} mean loss {running / (step + 1):.6f}", file=sys.stderr)
eager = [float(t) for t in eager_t]
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
