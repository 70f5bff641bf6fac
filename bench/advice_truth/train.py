"""One (model, variant) of the suite as an ordinary training script, for ``dlscope profile``:

    python bench/advice_truth/train.py --model cnn --variant baseline --steps 30
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import programs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(programs.BASE_BATCH), required=True)
    p.add_argument("--variant", default="baseline")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    t = programs.build(a.model, a.variant, a.device)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        t.step()
    print(f"{a.model}/{a.variant}: {a.steps} steps in {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
