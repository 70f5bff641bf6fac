"""What a fused optimizer leaves of the host's optimizer work: operators dispatched by one
``optimizer.step()``, per-parameter loop against foreach against fused, on stacks of small linear
layers that none of the advice suite's programs uses.

    python bench/optimizer_dispatch.py

unfused_optimizer's what-if keeps a share of the optimizer's host work once it is fused
(``FUSED_HOST_SHARE``). Operator counts do not depend on the device (CPU and CUDA run the same
``torch.optim`` code to the same ``aten::_fused_*`` operator), so they bound that share from a
measurement outside the suite: a fused step dispatches a handful of operators per parameter group
however many parameters it has; what remains per parameter is the Python that gathers the
parameters and their state into lists (``_init_group``), which this does not count. Prints one
JSON line: for each optimizer and layer count, the operators per step of each implementation.
"""

from __future__ import annotations

import json

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


def main() -> None:
    out: dict[str, dict[str, int | float]] = {}
    for cls in (torch.optim.AdamW, torch.optim.Adam, torch.optim.SGD):
        for layers in (20, 150):
            row: dict[str, int | float] = {k: ops_per_step(cls, layers, k) for k in ("loop", "foreach", "fused")}
            row["fused_over_loop"] = round(row["fused"] / row["loop"], 4)
            out[f"{cls.__name__}/{2 * layers} parameters"] = row
    print(json.dumps({"torch": torch.__version__, "ops_per_step": out}))


if __name__ == "__main__":
    main()
