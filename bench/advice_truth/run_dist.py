"""The distributed part of the ground-truth suite, on the GPU host (device tool, 2 or 4 GPUs).

    python3 bench/advice_truth/run_dist.py [--nproc 2] [--fsdp] [--steps 40] [--python-ms 25]

For ``dist_train.py`` (DDP, or FSDP2 with ``--fsdp``) on ``--nproc`` GPUs:

1. Truth, untraced: the balanced job and the job with a real straggler (rank 1 spends
   ``--python-ms`` of Python per batch), each run twice, alternated, without any profiler; rank 0's
   median step after the first 8 steps. The straggler's real cost is the difference.
2. Advice: the balanced job profiled twice (a false alarm must not appear in either) and the
   straggler job once, under ``dlscope profile`` (default mode); per profile ``dlscope advise``
   and the ``straggler`` and ``rank_balance`` reports as JSON.

Writes under $OUT: ``dist_<kind>.json`` (truth and advice), ``dist_<kind>.log``, and the profiles
as ``dist_<kind>_profiles.tar.gz``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OUT = Path(os.environ.get("OUT", "/tmp/out"))
WORK = Path("/tmp/advice_dist")
SKIP = 8  # warm-up and the traced window (steps 0-5) and a margin


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--fsdp", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--python-ms", type=float, default=25.0)
    ap.add_argument("--straggler", action=argparse.BooleanOptionalAction, default=True)
    a = ap.parse_args()
    kind = f"{'fsdp' if a.fsdp else 'ddp'}{a.nproc}"
    OUT.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    logf = (OUT / f"dist_{kind}.log").open("w")  # noqa: SIM115 - written through the run
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f}s] {msg}", file=logf, flush=True)
        print(f"[{time.monotonic() - t0:6.1f}s] {msg[:300]}", flush=True)

    def run(cmd: list[str], timeout: float = 240) -> subprocess.CompletedProcess | None:
        log("$ " + " ".join(cmd))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
        except subprocess.TimeoutExpired:
            log(f"  timed out after {timeout:.0f} s")
            return None
        for line in (p.stdout + p.stderr).strip().splitlines()[-6:]:
            log("  | " + line[:400])
        log(f"  rc={p.returncode}")
        return p

    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(a.nproc)]
    program = [str(HERE / "dist_train.py"), "--steps", str(a.steps), *(["--fsdp"] if a.fsdp else [])]
    slow = ["--slow-rank", "1", "--python-ms", str(a.python_ms)]
    res: dict = {"kind": kind, "steps": a.steps, "python_ms": a.python_ms, "truth": {}, "profiles": {}}

    def median_step(path: Path) -> float | None:
        if not path.exists():
            return None
        ts = json.loads(path.read_text())[SKIP:]
        return 1e3 * statistics.median(ts) if ts else None

    variants = [("balanced", [])] + ([("straggler", slow)] if a.straggler else [])
    for rnd in range(2):
        for name, extra in variants if rnd == 0 else variants[::-1]:
            times = WORK / f"bare_{name}_{rnd}.json"
            run([*launch, *program, *extra, "--times-out", str(times)])
            res["truth"].setdefault(name, []).append(median_step(times))
            log(f"  {name} untraced median step: {res['truth'][name][-1]}")
    if a.straggler and all(res["truth"].get(k) and None not in res["truth"][k] for k in ("balanced", "straggler")):
        b, s = statistics.fmean(res["truth"]["balanced"]), statistics.fmean(res["truth"]["straggler"])
        res["straggler_real_cost_ms"] = s - b
        res["straggler_real_cost_pct"] = 100 * (s - b) / s

    runs = [("balanced_a", []), ("balanced_b", [])] + ([("straggler", slow)] if a.straggler else [])
    for name, extra in runs:
        path = WORK / f"{kind}_{name}.dlscope"
        times = WORK / f"prof_{name}.json"
        run(
            [
                sys.executable,
                "-m",
                "dlscope",
                "profile",
                "-o",
                str(path),
                "-f",
                "--quiet",
                "--",
                *launch,
                *program,
                *extra,
                "--times-out",
                str(times),
            ],
            300,
        )
        r: dict = {"untraced_median_step_ms": median_step(times)}
        if path.exists():
            p = run([sys.executable, "-m", "dlscope", "advise", str(path), "--format", "json"], 120)
            try:
                found = json.loads(p.stdout) if p and p.returncode == 0 else []
                found = found.get("findings", found) if isinstance(found, dict) else found
                r["advice"] = [
                    {k: f.get(k) for k in ("id", "severity", "saving_ms_per_step", "saving_pct", "evidence")}
                    for f in found
                ]
            except ValueError:
                r["advice"] = "not JSON"
            for report in ("straggler", "rank_balance"):
                p = run(
                    [sys.executable, "-m", "dlscope", "stats", str(path), "--report", report, "--format", "json"], 120
                )
                try:
                    r[report] = json.loads(p.stdout) if p and p.returncode == 0 else None
                except ValueError:
                    r[report] = None
        res["profiles"][name] = r
        log(f"  {name}: findings {[(f['id'], f['severity']) for f in r.get('advice') or [] if isinstance(f, dict)]}")
    (OUT / f"dist_{kind}.json").write_text(json.dumps(res, indent=1, default=str))
    with tarfile.open(OUT / f"dist_{kind}_profiles.tar.gz", "w:gz") as tar:
        for p in sorted(WORK.glob(f"{kind}_*.dlscope")):
            tar.add(p, arcname=p.name)
    log(f"done: {json.dumps({k: res.get(k) for k in ('truth', 'straggler_real_cost_ms', 'straggler_real_cost_pct')})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
