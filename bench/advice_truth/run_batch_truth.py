"""A batch-size fix's real saving per sample, each size run as its own program (as a user would
run it), alternated, untraced: a second truth for the suite's ``batch2x`` rows, whose in-process
measurement (``measure.py``) disagreed with the profiled runs' untraced steps.

    python3 bench/advice_truth/run_batch_truth.py --model cnn --batches 64,128 --runs 3 --steps 40

Each run is ``train.py --model M --batch B --times-out``; a run's time per sample is its median
step after :data:`SKIP` steps, over its batch. The saving is the median over the alternations of
(small batch's ms per sample - large batch's) / small batch's, with the per-alternation values
kept. Writes ``batch_truth_<model>.json`` under $OUT.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ.get("OUT", "/tmp/out"))
SKIP = 8


def per_sample_ms(model: str, batch: int, steps: int, path: Path) -> float:
    subprocess.run(
        [
            sys.executable,
            str(HERE / "train.py"),
            "--model",
            model,
            "--batch",
            str(batch),
            "--steps",
            str(steps),
            "--times-out",
            str(path),
        ],
        check=True,
        timeout=300,
    )
    times = json.loads(path.read_text())["step_ms"][SKIP:]
    return statistics.median(times) / batch


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batches", default="64,128", help="the program's batch and the larger one")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    small, large = (int(b) for b in a.batches.split(","))
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in range(a.runs):
        order = (small, large) if r % 2 == 0 else (large, small)
        got = {b: per_sample_ms(a.model, b, a.steps, Path(f"/tmp/bt_{a.model}_{b}_{r}.json")) for b in order}
        saving = 100 * (got[small] - got[large]) / got[small]
        rows.append({"small_ms_per_sample": got[small], "large_ms_per_sample": got[large], "saving_pct": saving})
        print(
            f"{a.model} {small}->{large}, run {r + 1}: {got[small]:.4f} -> {got[large]:.4f} ms/sample, "
            f"saving {saving:+.1f}%",
            flush=True,
        )
    res = {
        "model": a.model,
        "batches": [small, large],
        "steps": a.steps,
        "skip": SKIP,
        "runs": rows,
        "saving_pct": statistics.median(r["saving_pct"] for r in rows),
    }
    (OUT / f"batch_truth_{a.model}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
