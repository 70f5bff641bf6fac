"""The suite's runner on the GPU machine (device tool). Parts, in order, each guarded so that one
failure is recorded and the rest goes on:

* ``measure``: per model, ``measure.py`` (untraced step time of the baseline and every variant,
  alternated, noise reported);
* ``profile``: per model, the baseline under ``dlscope profile`` in the default mode (30 steps:
  the warm-up and 5 traced, the rest untraced) and in full mode (12 steps), and ``dlscope advise
  --format json --what-if`` of each;
* ``variants``: each variant under ``dlscope profile`` (default mode, 20 steps), while time is
  left.

    python3 bench/advice_truth/run_gpu.py [--parts measure,profile] [--models mlp,gpt,cnn] [--budget 540]

Writes under $OUT: ``measure_MODEL.json``, ``advise.json`` (every profile's findings), ``log.txt``
and ``profiles_N.tar.gz`` (the profiles, to keep as test data, in parts the device tool brings back).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = Path(os.environ.get("OUT", "/tmp/out"))
WORK = Path(os.environ.get("WORK", "/tmp/advice_truth"))
sys.path.insert(0, str(HERE))
import programs  # noqa: E402

T0 = time.monotonic()
LOG = OUT / "log.txt"


def log(msg: str) -> None:
    line = f"[{time.monotonic() - T0:6.1f}s] {msg}"
    print(line, flush=True)
    with LOG.open("a") as f:
        f.write(line + "\n")


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    log("$ " + " ".join(cmd))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        log(f"  timed out after {timeout:.0f} s")
        return None
    tail = (p.stdout + p.stderr).strip().splitlines()[-12:]
    for line in tail:
        log("  | " + line[:300])
    log(f"  rc={p.returncode}")
    return p


def profile(model: str, variant: str, mode: str, steps: int, advise: dict, timeout: float) -> None:
    path = WORK / f"{model}_{variant}_{mode}.dlscope"
    p = run(
        [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "-o",
            str(path),
            "--mode",
            mode,
            "--",
            sys.executable,
            str(HERE / "train.py"),
            "--model",
            model,
            "--variant",
            variant,
            "--steps",
            str(steps),
        ],
        timeout,
    )
    if p is None or not path.exists():
        return
    a = run([sys.executable, "-m", "dlscope", "advise", str(path), "--format", "json"], 120)
    if a is not None and a.returncode == 0:
        try:
            advise[path.name] = json.loads(a.stdout)
        except ValueError as e:
            log(f"  advise output is not JSON: {e}")
    s = run([sys.executable, "-m", "dlscope", "summary", str(path), "--format", "json"], 120)
    if s is not None and s.returncode == 0:
        (WORK / f"{path.name}.summary.json").write_text(s.stdout)


TAR_LIMIT = 14e6  # the device tool brings back files of at most 16 MB


def pack(paths: list[Path]) -> None:
    """The profiles into profiles_N.tar.gz, each under :data:`TAR_LIMIT` (one part per file
    brought back; a profile larger than the limit alone is left out and logged)."""
    part, tar = 0, None
    for p in paths:
        if tar is None:
            part += 1
            name = OUT / f"profiles_{part}.tar.gz"
            tar = tarfile.open(name, "w:gz")  # noqa: SIM115 - closed when full or at the end
        tar.add(p, arcname=p.name)
        if tar.fileobj is not None and tar.fileobj.tell() > TAR_LIMIT:
            tar.close()
            log(f"{name.name}: {name.stat().st_size / 1e6:.1f} MB")
            tar = None
    if tar is not None:
        tar.close()
        log(f"{name.name}: {name.stat().st_size / 1e6:.1f} MB")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="measure,profile,variants")
    ap.add_argument("--models", default="mlp,gpt,cnn")
    ap.add_argument("--budget", type=float, default=540.0, help="seconds; parts stop starting new runs after it")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--measure-models", default="", help="models to measure (default: --models)")
    ap.add_argument("--full", default="", help="models whose baseline is also profiled in full mode (default: all)")
    a = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    parts, models = a.parts.split(","), a.models.split(",")
    full = a.full.split(",") if a.full else models
    advise: dict = json.loads((OUT / "advise.json").read_text()) if (OUT / "advise.json").exists() else {}
    if "measure" in parts:
        for m in a.measure_models.split(",") if a.measure_models else models:
            run(
                [
                    sys.executable,
                    str(HERE / "measure.py"),
                    "--model",
                    m,
                    "--rounds",
                    str(a.rounds),
                    "-o",
                    str(OUT / f"measure_{m}.json"),
                ],
                300,
            )
    if "profile" in parts:
        for m in models:
            if time.monotonic() - T0 > a.budget:
                log(f"budget spent: no profile of {m}")
                break
            profile(m, "baseline", "default", 30, advise, 150)
            if m in full:
                profile(m, "baseline", "full", 12, advise, 150)
    if "variants" in parts:
        for m in models:
            for v in programs.MODEL_FIXES[m]:
                if time.monotonic() - T0 > a.budget:
                    log(f"budget spent: no profile of {m}/{v}")
                    break
                profile(m, v, "default", 20, advise, 120)
    (OUT / "advise.json").write_text(json.dumps(advise, indent=1))
    pack(sorted(WORK.iterdir(), key=lambda p: (p.suffix != ".json", p.name)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
