"""A small DistributedDataParallel training job, for `dlscope profile -- torchrun ...`.

    torchrun --nproc-per-node 2 examples/ddp_train.py [--steps N] [--slow-rank R --sleep-ms MS]

NCCL on GPUs when there are enough of them, else Gloo on the CPU. Each step loads a batch
inside a ``data`` phase, where ``--slow-rank`` sleeps ``--sleep-ms`` to make a straggler (the
other ranks then wait for it at DDP's gradient all-reduce). ``--times-out`` writes every step's
duration (seconds, as rank 0 saw them) to a JSON file, for overhead measurements without any
profiler. ``--spawn N`` starts N ranks with torch.multiprocessing.spawn instead of a launcher.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import dlscope


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--sleep-ms", type=float, default=20.0)
    ap.add_argument("--bucket-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    ap.add_argument("--times-out", metavar="PATH")
    ap.add_argument("--spawn", type=int, default=0, metavar="N")
    return ap.parse_args()


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= world
    if "RANK" not in os.environ:  # started by mp.spawn
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world)
    else:
        dist.init_process_group("nccl" if gpu else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank))}" if gpu else "cpu")
    if gpu:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    model = DistributedDataParallel(
        torch.nn.Sequential(*layers, torch.nn.Linear(args.hidden, 10)).to(device), bucket_cap_mb=args.bucket_mb
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with dlscope.phase("data"):
            x = torch.randn(args.batch, args.hidden, device=device)
            y = torch.randint(0, 10, (args.batch,), device=device)
            if rank == args.slow_rank:
                time.sleep(args.sleep_ms / 1e3)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if args.times_out and rank == 0:
        with open(args.times_out, "w") as f:
            json.dump(times, f)
    # Free DDP (and its reference to the process group) before destroying the group: a Gloo
    # group destroyed later, at interpreter exit, joins its worker threads while holding the GIL
    # that a worker may need to finish (seen with torch 2.13: the job hangs at exit).
    del model, opt
    gc.collect()
    dist.destroy_process_group()


def main() -> None:
    args = parse()
    if args.spawn:
        import torch.multiprocessing as mp

        mp.spawn(train, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), args)


if __name__ == "__main__":
    main()
