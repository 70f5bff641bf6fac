"""``dlscope try`` on the suite's programs, on the GPU host (device tool): the measured saving of
each fix it applies to the unchanged program, to set against ``measure.py``'s numbers for the
same fix (the suite's variants change the source) and against the advice's prediction.

    python3 bench/advice_truth/run_try.py [--jobs gpt2:baseline:2,mlp:baseline:3,gpt2:bf16:2] [--budget 540]

Each job is MODEL:VARIANT:REPEAT. Writes ``try_MODEL_VARIANT.json`` (dlscope try --format json)
and ``try.log`` under $OUT.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = Path(os.environ.get("OUT", "/tmp/out"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--jobs",
        default="gpt2:baseline:2,mlp:baseline:3,gpt2:bf16:2",
        help="MODEL:VARIANT:REPEAT[:FIXES] (FIXES: names joined by '+', default auto)",
    )
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=540.0)
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with (OUT / "try.log").open("a") as log:
        for job in a.jobs.split(","):
            model, variant, repeat, *fixes = job.split(":")
            fixes = fixes[0].replace("+", ",") if fixes else "auto"
            if time.monotonic() - t0 > a.budget:
                log.write(f"budget spent: {job} not run\n")
                continue
            cmd = [
                sys.executable,
                "-m",
                "dlscope",
                "try",
                "--fixes",
                fixes,
                "--steps",
                str(a.steps),
                "--repeat",
                repeat,
                "-o",
                f"/tmp/try_{model}_{variant}",
                "-f",
                "--format",
                "json",
                "--",
                sys.executable,
                str(HERE / "train.py"),
                "--model",
                model,
                "--variant",
                variant,
                "--steps",
                "100000",
            ]
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            t = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True)
            # '-' between fix names: the device tool brings back only names of letters, digits, '.', '_' and '-'
            (OUT / f"try_{model}_{variant}{'_' + fixes.replace(',', '-') if fixes != 'auto' else ''}.json").write_text(
                p.stdout
            )
            log.write(p.stderr[-3000:] + f"\nrc={p.returncode} in {time.monotonic() - t:.0f} s\n")
            log.flush()
            print(f"{job}: rc={p.returncode} in {time.monotonic() - t:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
