"""What autocast adds to the host's work: operators dispatched in forward + backward, with and
without ``torch.autocast``, on models that none of the advice suite's programs uses.

    python bench/autocast_host_cost.py --count-ops      # the measurement dlscope's constants cite
    python bench/autocast_host_cost.py --time           # host ms per step on this machine too

amp_not_enabled's what-if multiplies the host's forward/backward work by the casts autocast adds
(every matrix multiply and convolution first casts its fp32 inputs: more operators to dispatch and
launch). Issue 21 asks for every such constant to come from a measurement outside the suite that
judges the advice, so this counts, with a ``TorchDispatchMode``, every operator PyTorch's
dispatcher runs for one forward + backward of four small models (PyTorch's
``nn.TransformerEncoder``, an MLP, a CNN with batch norm, a residual MLP with layer norm), plain
and under bf16 autocast. Operator counts do not depend on the device: CPU autocast inserts its
casts the way CUDA's does. ``analysis/core/autocast_ops.py`` takes two numbers from the output: the
casts added per matrix-math operator (``ADDED_PER_CASTABLE``) and the median ratio of launching
operators (``TYPICAL_HOST_FACTOR``); metadata operators (views, transposes, ``detach``), which launch
nothing, are left out of every count, as ``pass_ops`` leaves them out of a profile's.

``--time`` also times the steps on this machine (the CPU's own bf16 arithmetic included, so it is
not the GPU host's cost). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import time
from collections import Counter
from typing import Any

import torch
from dispatch_count import Counting
from torch import nn

from dlscope.analysis.core.autocast_ops import METADATA_OPS

# the dispatcher's names of what dlscope's CASTABLE_RE matches in a profile (aten::addmm, ...)
CASTABLE = re.compile(
    r"^aten\.(addmm|addmv|mm|bmm|baddbmm|addbmm|convolution|convolution_backward|"
    r"_scaled_dot_product_.*attention.*)$"
)
METADATA = {f"aten.{name}" for name in METADATA_OPS}  # launch no kernel: left out, as in a profile


def models() -> dict[str, tuple[nn.Module, torch.Tensor]]:
    torch.manual_seed(0)
    enc = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
    return {
        "transformer": (nn.TransformerEncoder(enc, 6, enable_nested_tensor=False), torch.randn(2, 8, 32)),
        "mlp": (nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(32, 32), nn.GELU())]), torch.randn(4, 32)),
        "cnn": (
            nn.Sequential(
                *[
                    m
                    for i in range(6)
                    for m in (nn.Conv2d(3 if i == 0 else 16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
                ],
                nn.Flatten(),
                nn.Linear(16 * 8 * 8, 10),
            ),
            torch.randn(2, 3, 8, 8),
        ),
        "residual_mlp": (
            nn.Sequential(
                *[m for _ in range(4) for m in (nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64), nn.LayerNorm(64))]
            ),
            torch.randn(8, 64),
        ),
    }


def one_step(model: nn.Module, x: torch.Tensor, autocast: bool) -> None:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(x).float().square().mean()
    loss.backward()
    model.zero_grad(set_to_none=True)


def count(model: nn.Module, x: torch.Tensor, autocast: bool) -> Counter[str]:
    mode = Counting()
    with mode:
        one_step(model, x, autocast)
    return mode.ops


def step_ms(model: nn.Module, x: torch.Tensor, autocast: bool, steps: int = 50) -> float:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        one_step(model, x, autocast)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count-ops", action="store_true", help="count dispatched operators (the default)")
    ap.add_argument("--time", action="store_true", help="also time the steps on this machine")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, Any] = {"machine": platform.node(), "torch": torch.__version__, "models": {}}
    for name, (model, x) in models().items():
        plain, cast = count(model, x, False), count(model, x, True)
        for ops in (plain, cast):
            for meta in METADATA & set(ops):
                del ops[meta]
        n0, n1 = sum(plain.values()), sum(cast.values())
        castable = sum(v for k, v in plain.items() if CASTABLE.match(k))
        row: dict[str, Any] = {
            "ops": n0,
            "ops_autocast": n1,
            "ratio": round(n1 / n0, 3),
            "castable": castable,
            "added_per_castable": round((n1 - n0) / castable, 2),
            "added": dict((cast - plain).most_common(3)),
        }
        if a.time:
            for autocast in (False, True):
                step_ms(model, x, autocast, 10)
            ms = [(step_ms(model, x, False), step_ms(model, x, True)) for _ in range(a.reps)]
            row["time_ratio_median"] = round(statistics.median(c / p for p, c in ms), 3)
        out["models"][name] = row
    rows = out["models"].values()
    out["added_per_castable_median"] = statistics.median(r["added_per_castable"] for r in rows)
    out["ratio_median"] = round(statistics.median(r["ratio"] for r in rows), 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
