"""How many launches the GPU's queue holds for the kernels a training step really launches (issue 38's
prediction miss): the replay's queue model (``LAUNCH_QUEUE_DEPTH``, 1,022) was measured with one tiny
``add_`` kernel. Behind a sleeping kernel, each kind of launch below is repeated and timed; the first
launch that takes far longer than the median (it waited for room) tells how many the queue held.

    python bench/queue_depth.py [-o queue_depth.json]

Kinds: ``add_`` on one element (the replay's source), AdamW's per-parameter kernels on a BERT-sized
parameter (``lerp_``, ``addcmul_``, ``addcdiv_`` of 768x768 tensors), an AdamW step over many small
parameters (``foreach=False``: its kernels in the order the optimizer launches them), and a
non-contiguous ``add`` (larger kernel arguments: strides)."""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from machine import report


def first_wait(launch, n: int) -> dict:
    """Launches behind a long sleeping kernel: how many went before one waited."""
    out = []
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(3e9))  # ~1.5 s at ~2 GHz: nothing ahead of it finishes meanwhile
        costs = []
        for _ in range(n):
            t = time.perf_counter_ns()
            launch()
            costs.append(time.perf_counter_ns() - t)
        torch.cuda.synchronize()
        med = statistics.median(costs[:200])
        out.append({"median_ns": med, "first_wait": next((i for i, c in enumerate(costs) if c > 20 * med), None)})
    return {"trials": out}


def adamw_kernels_per_step(params: list[torch.nn.Parameter]) -> int:
    """Kernels one AdamW step (foreach=False) launches on these parameters, counted by the profiler."""
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    opt.step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        opt.step()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-o", "--out", default="")
    a = p.parse_args()
    dev = "cuda"
    one = torch.zeros(1, device=dev)
    big = [torch.randn(768, 768, device=dev) for _ in range(3)]
    strided = torch.randn(64, 64, 8, device=dev).transpose(0, 2)
    res: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name()}
    res["add_1elem"] = first_wait(lambda: one.add_(1), 3000)
    res["lerp_768x768"] = first_wait(lambda: big[0].lerp_(big[1], 0.1), 3000)
    res["addcmul_768x768"] = first_wait(lambda: big[0].addcmul_(big[1], big[2], value=0.001), 3000)
    denom = big[2].abs().add_(1)
    res["addcdiv_768x768"] = first_wait(lambda: big[0].addcdiv_(big[1], denom, value=-0.001), 3000)
    res["add_strided"] = first_wait(lambda: strided.add_(1), 3000)
    # AdamW steps over 20 small parameters (a dozen kernels each), launched as the optimizer does: the
    # first step that waits tells the depth to within one step's kernels
    params = [torch.nn.Parameter(torch.randn(64, device=dev)) for _ in range(20)]
    for q in params:
        q.grad = torch.randn_like(q)
    res["adamw_kernels_per_step"] = adamw_kernels_per_step(params)
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=False)
    steps = []
    for _ in range(3):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(3e9))
        costs = []
        for _ in range(30):
            t = time.perf_counter_ns()
            opt.step()
            costs.append(time.perf_counter_ns() - t)
        torch.cuda.synchronize()
        steps.append(costs)
    # the step whose time jumps is the one in which the queue filled
    res["adamw_step_ns"] = steps
    report(res, a.out)


if __name__ == "__main__":
    main()
