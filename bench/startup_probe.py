"""Where a training program's start-up goes, stage by stage (issue 38: what `dlscope try` can start
ahead of a run's turn). Runs the BERT-like program's own set-up (bench/programs/bert_like.py) with a
clock after each stage, the GPU synchronized where a stage uses it:

    python bench/startup_probe.py [--steps 26] [-o startup.json]

Stages, seconds after the process started (from /proc/self/stat, 10 ms resolution): interpreter up,
``import torch``, the model built on the CPU, the CUDA context, the model moved, AdamW, the DataLoader
and its first batch, the first step (synchronized), and every step after it."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from machine import report


def process_start_s() -> float:
    """This process's start, on time.time()'s clock (from /proc: boot time + start ticks)."""
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=26)
    p.add_argument("-o", "--out", default="")
    a = p.parse_args()
    start = process_start_s()
    marks: list[tuple[str, float]] = [("interpreter", time.time() - start)]

    def mark(name: str) -> None:
        marks.append((name, round(time.time() - start, 3)))

    import torch

    mark("import torch")
    sys.path.insert(0, str(Path(__file__).parent / "programs"))
    import bert_like

    mark("import program")
    torch.manual_seed(0)
    model = bert_like.BertLike(12, 128)
    mark("model on CPU")
    torch.cuda.init()
    mark("CUDA context")
    model = model.to("cuda")
    torch.cuda.synchronize()
    mark("model moved")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    mark("AdamW")
    loader = torch.utils.data.DataLoader(bert_like.Sentences(128, 7), batch_size=32, num_workers=0, pin_memory=True)
    batches = iter(loader)
    x, labels = next(batches)
    mark("first batch")
    for step in range(a.steps):
        if step:
            x, labels = next(batches)
        x, labels = x.to("cuda", non_blocking=True), labels.to("cuda", non_blocking=True)
        loss = model(x, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        mark(f"step {step + 1}")
    out = {"marks": marks, "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    report(out, a.out)


if __name__ == "__main__":
    main()
