"""The suite's distributed program: the GPT decoder of ``programs.py`` trained with DDP or FSDP2
on every GPU of the host, for ``dlscope profile -- torchrun ...``.

    torchrun --nproc-per-node 2 bench/advice_truth/dist_train.py [--fsdp] [--steps N]
             [--slow-rank R --python-ms MS] [--times-out PATH]

Each step takes a batch (random tokens made on the GPU: no input pipeline to confound), runs
forward, backward and the optimizer, and logs the loss with ``.item()`` as most training loops
do. ``--slow-rank`` makes a real straggler: that rank spends ``--python-ms`` of pure Python
(a busy loop, not a sleep) on each batch before its forward, so the other ranks wait for it at
the gradient all-reduce (DDP) or the all-gathers and reduce-scatters (FSDP2). ``--times-out``
writes every step's wall time as rank 0 saw it. ``--prefetch N`` and ``--keep-last`` (FSDP2) are the
settings ``fsdp_exposed_gathers`` advises: explicit prefetch of the next N blocks' all-gathers, and
the last block kept gathered between forward and backward.

``--grad-sync naive`` replaces DDP by one all-reduce per parameter's gradient after backward (the
many small collectives ``small_collectives`` names); ``--grad-sync bucketed`` by one all-reduce of
all gradients flattened together (its fix). ``--width`` sets the model width (small widths make the
gradients small and the step short, so the collectives' fixed latency shows).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from programs import GPT  # noqa: E402


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard per block) instead of DDP")
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--python-ms", type=float, default=25.0)
    ap.add_argument(
        "--slow-where",
        choices=("before", "forward"),
        default="before",
        help=(
            "where the slow rank spends its Python: before the forward (outside every phase), or "
            "inside it, in a hook on the middle block (its host then launches the forward late)"
        ),
    )
    ap.add_argument("--times-out", metavar="PATH")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--grad-sync", choices=("ddp", "naive", "bucketed"), default="ddp")
    ap.add_argument(
        "--prefetch",
        type=int,
        default=0,
        help=(
            "FSDP2: each block prefetches the next N blocks' all-gathers in forward and backward "
            "(explicit prefetch; 0 = FSDP2's implicit one-ahead)"
        ),
    )
    ap.add_argument(
        "--gpu-offset",
        type=int,
        default=0,
        help=(
            "use GPU LOCAL_RANK + N: a launch that plays a second host on one machine, with every GPU "
            "visible (NCCL's peer-to-peer path needs the peers' GPUs visible; hiding them with "
            "CUDA_VISIBLE_DEVICES sends the collectives through host memory)"
        ),
    )
    ap.add_argument(
        "--keep-last",
        action="store_true",
        help=(
            "FSDP2: the last block keeps its parameters gathered between forward and backward "
            "(reshard_after_forward=False)"
        ),
    )
    return ap.parse_args()


def sync_grads(params: list[torch.Tensor], how: str, world: int) -> None:
    """All-reduce the gradients by hand: one collective per gradient, or one for all of them."""
    grads = [p.grad for p in params if p.grad is not None]
    if how == "naive":
        for g in grads:
            dist.all_reduce(g)
            g.div_(world)
    else:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        flat.div_(world)
        offset = 0
        for g in grads:
            n = g.numel()
            g.copy_(flat[offset : offset + n].view_as(g))
            offset += n


def busy_python(ms: float) -> int:
    """Pure-Python work for ``ms`` milliseconds (what a slow collate or augmentation does)."""
    end, n = time.perf_counter() + ms / 1e3, 0
    while time.perf_counter() < end:
        n += sum(i * i for i in range(200)) & 1
    return n


def main() -> None:
    a = parse()
    # the ranks of this launch each need a GPU of this host (a multi-node launch has fewer here
    # than the job has ranks: LOCAL_WORLD_SIZE, not WORLD_SIZE)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= local + a.gpu_offset
    dist.init_process_group("nccl" if gpu else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', rank)) + a.gpu_offset}" if gpu else "cpu")
    if gpu:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    vocab = 50304 if gpu else 1024
    d = a.width if gpu else 64
    model = GPT(vocab=vocab, seq=a.seq, d=d, layers=a.layers, heads=max(1, min(12, d // 64)) if gpu else 4).to(device)
    if a.fsdp:
        from torch.distributed.fsdp import fully_shard

        blocks = list(model.blocks)
        for i, block in enumerate(blocks):
            fully_shard(block, reshard_after_forward=not (a.keep_last and i == len(blocks) - 1))
        fully_shard(model)
        if a.prefetch > 0:  # the fix fsdp_exposed_gathers advises, as FSDP2's documentation writes it
            for i, block in enumerate(blocks):
                block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + a.prefetch])
                block.set_modules_to_backward_prefetch(blocks[max(0, i - a.prefetch) : i][::-1])
        train_model = model
    elif a.grad_sync != "ddp":
        train_model = model
    else:
        train_model = nn.parallel.DistributedDataParallel(model)
    if rank == a.slow_rank and a.slow_where == "forward":

        def slow_block(*_: object) -> None:
            busy_python(a.python_ms)  # (a pre-hook's result, unless None, replaces the block's input)

        model.blocks[len(model.blocks) // 2].register_forward_pre_hook(slow_block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=gpu)
    g = torch.Generator(device=device).manual_seed(rank)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        idx = torch.randint(0, vocab, (a.batch, a.seq + 1), device=device, generator=g)
        x, y = idx[:, :-1], idx[:, 1:]
        if rank == a.slow_rank and a.slow_where == "before":
            busy_python(a.python_ms)
        out = train_model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_sync != "ddp" and not a.fsdp:
            sync_grads(list(model.parameters()), a.grad_sync, dist.get_world_size())
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    if a.times_out and rank == 0:
        Path(a.times_out).write_text(json.dumps(times))
    del train_model, model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
