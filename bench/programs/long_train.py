"""A long training run of many small steps with phases, for bench/long_run.py: an MLP on random
data (CUDA when there is a GPU), each step a data wait, a forward/backward/optimizer step and a
bit of bookkeeping, for SECONDS seconds. Unmodified PyTorch apart from the phases, so that the
default mode traces its window and then records only steps, phases and counters.

    dlscope profile -- python bench/programs/long_train.py SECONDS [STEP_SLEEP_S]
"""

import sys
import time

import torch
from torch import nn

import dlscope

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
wait_s = float(sys.argv[2]) if len(sys.argv) > 2 else 0.004  # the "data loader": sleeps, like I/O
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
torch.set_num_threads(1)  # a small model: more threads only contend with the profiler and other jobs
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 256, device=dev), torch.randint(0, 10, (64,), device=dev)
end = time.monotonic() + seconds
steps = 0
while time.monotonic() < end:
    with dlscope.phase("preprocess"):
        time.sleep(wait_s)
    with dlscope.phase("run"):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with dlscope.phase("postprocess"):
        if steps % 100 == 0:
            loss.item()
    dlscope.step()
    steps += 1
print(f"steps {steps}", flush=True)
