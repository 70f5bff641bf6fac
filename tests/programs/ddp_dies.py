"""A tiny DDP job on Gloo (or NCCL, ``--backend nccl``: one GPU per rank) whose rank ``--die-rank`` ends
itself at step ``--die-at``.

    torchrun --nproc-per-node 2 ddp_dies.py --steps 40 --die-rank 1 --die-at 15 [--how kill|hang]

``kill``: the rank SIGKILLs itself in step ``--die-at``, after that step's all-reduce and before it
ends (it has completed ``--die-at`` steps; the other ranks complete that step too, then fail in
the next all-reduce). ``hang``: the rank stops taking part in collectives (sleeps), so the others wait in their
all-reduce until Gloo's timeout (``--timeout-s``). Each rank prints ``rank R step S`` on stdout
after each completed step.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import dlscope

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--die-rank", type=int, default=1)
ap.add_argument("--die-at", type=int, default=15)
ap.add_argument("--how", choices=("kill", "hang"), default="kill")
ap.add_argument("--timeout-s", type=float, default=3.0)
ap.add_argument("--step-s", type=float, default=0.0, help="sleep this long in each step's data phase")
ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
ap.add_argument("--spawn", type=int, default=0, metavar="N", help="start N ranks with torch.multiprocessing.spawn")
ap.add_argument(
    "--item",
    action="store_true",
    help="read the loss with .item() each step (the host then waits in the step's "
    "all-reduce, where NCCL's watchdog can time it out)",
)
args = ap.parse_args()


def train(local: int) -> None:
    if args.spawn:
        os.environ.update(
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=os.environ["DDP_DIES_PORT"],
            RANK=str(local),
            WORLD_SIZE=str(args.spawn),
        )
    dev = torch.device("cpu")
    if args.backend == "nccl":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    dist.init_process_group(args.backend)  # the default timeout: the ranks may start seconds apart on a busy machine
    rank = dist.get_rank()
    # the short timeout only for the training's collectives, which start once both ranks are here
    group = dist.new_group(timeout=datetime.timedelta(seconds=args.timeout_s))
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 2).to(dev), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prof = dlscope.current()
    for step in range(args.steps):
        if rank == args.die_rank and step == args.die_at and args.how == "hang":
            time.sleep(3600)  # the others wait in this step's all-reduce until the timeout
        with dlscope.phase("data"):
            x, y = torch.randn(4, 8, device=dev), torch.randint(0, 2, (4,), device=dev)
            time.sleep(args.step_s)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if args.item:
            loss.item()  # waits for the step's kernels, the all-reduce among them
        if rank == args.die_rank and step == args.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if prof is not None:
            prof.step()
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if args.spawn:
        import socket

        import torch.multiprocessing as mp

        with socket.socket() as s:  # a free port for the ranks' rendezvous
            s.bind(("127.0.0.1", 0))
            os.environ["DDP_DIES_PORT"] = str(s.getsockname()[1])
        mp.spawn(train, nprocs=args.spawn)
    else:
        train(int(os.environ.get("LOCAL_RANK", 0)))
