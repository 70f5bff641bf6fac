"""One (model, variant) of the suite as an ordinary training script, for ``dlscope profile``:

python bench/advice_truth/train.py --model cnn --variant baseline --steps 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import programs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(programs.BASE_BATCH), required=True)
    p.add_argument("--variant", default="baseline")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=0, help="override the variant's batch size")
    p.add_argument("--times-out", default="", help="write each step's wall time (ms) here as JSON")
    a = p.parse_args()
    c = programs.config(a.model, a.variant)
    if a.batch:
        c = replace(c, batch=a.batch)
    t = programs.Trainer(c, a.device)
    t0 = time.perf_counter()
    times = []
    for _ in range(a.steps):
        s = time.perf_counter()
        t.step()
        times.append((time.perf_counter() - s) * 1e3)
    print(f"{a.model}/{a.variant}: {a.steps} steps in {time.perf_counter() - t0:.2f} s")
    if a.times_out:
        Path(a.times_out).write_text(
            json.dumps({"model": a.model, "variant": a.variant, "batch": c.batch, "step_ms": times})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
