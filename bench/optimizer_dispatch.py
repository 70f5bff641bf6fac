"""What a fused optimizer leaves of the host's optimizer work: operators dispatched by one
``optimizer.step()``, per-parameter loop against foreach against fused, on stacks of small linear
layers that none of the advice suite's programs uses.

    python bench/optimizer_dispatch.py [--time]

unfused_optimizer's what-if keeps a share of the optimizer's host work once it is fused
(``FUSED_HOST_SHARES``). Operator counts do not depend on the device (CPU and CUDA run the same
``torch.optim`` code to the same ``aten::_fused_*`` operator), so they bound that share from a
measurement outside the suite: a fused step dispatches a handful of operators per parameter group
however many parameters it has; what remains per parameter is the Python that gathers the
parameters and their state into lists (``_init_group``), which this does not count: a lower bound
on the share. ``--time`` adds an upper bound: the host time of a step on the CPU, 300 parameters of
one element each, fused over the loop (the CPU's fused step still works through each tensor on
the host, which a GPU's does not, and the loop launches no kernels, which a GPU's does). Prints one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from dispatch_count import Counting
from torch import nn


def ops_per_step(cls: type[torch.optim.Optimizer], layers: int, kind: str) -> int:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(16, 16) for _ in range(layers)])
    extra = {"momentum": 0.9} if cls is torch.optim.SGD else {}
    how = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[kind]
    opt = cls(model.parameters(), lr=1e-3, **how, **extra)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()  # the first step creates the state
    mode = Counting()
    with mode:
        opt.step()
    return sum(n for name, n in mode.ops.items() if name.startswith("aten."))


def step_ms(cls: type[torch.optim.Optimizer], kind: str, params: int = 300) -> float:
    """Median host ms of one step on the CPU, ``params`` parameters of one element."""
    torch.manual_seed(0)
    ps = [nn.Parameter(torch.randn(1)) for _ in range(params)]
    extra = {"momentum": 0.9} if cls is torch.optim.SGD else {}
    how = {"loop": {"foreach": False}, "fused": {"fused": True}}[kind]
    opt = cls(ps, lr=1e-3, **how, **extra)
    for p in ps:
        p.grad = torch.randn_like(p)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(40):
        t0 = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", action="store_true", help="also time a step on this CPU (the share's upper bound)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, dict[str, int | float]] = {}
    for cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD):
        for layers in (20, 150):
            row: dict[str, int | float] = {k: ops_per_step(cls, layers, k) for k in ("loop", "foreach", "fused")}
            row["fused_over_loop"] = round(row["fused"] / row["loop"], 4)
            out[f"{cls.__name__}/{2 * layers} parameters"] = row
    result: dict[str, object] = {"torch": torch.__version__, "ops_per_step": out}
    if a.time:
        result["cpu_time_fused_over_loop"] = {
            cls.__name__: round(step_ms(cls, "fused") / step_ms(cls, "loop"), 3)
            for cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD)
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
