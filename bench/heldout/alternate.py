"""The truth for a held-out program: each fix made in its source (a flag of the program), run as
its own process, alternated with the unchanged program, untraced; each round's saving is the
fixed run's median step against that round's baseline run, and the rounds give Student's t
interval (as ``dlscope try`` reports its own).

    python3 bench/heldout/alternate.py --rounds 3 --skip 10 -o truth.json -- python3 prog.py --steps 40 \\
        :: bf16=--bf16 workers="--workers 6"

The program must accept ``--times-out FILE`` and write {"step_ms": [...]} there.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from dlscope.analysis.compare.significance import paired_rounds  # noqa: E402


def median_step(cmd: list[str], skip: int, timeout: float) -> float:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([*cmd, "--times-out", f.name], check=True, timeout=timeout, stdout=subprocess.DEVNULL)
        return statistics.median(json.loads(Path(f.name).read_text())["step_ms"][skip:])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", type=int, default=10, help="warm-up steps left out of each run's median")
    ap.add_argument("--timeout", type=float, default=180)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("rest", nargs=argparse.REMAINDER, help="-- CMD ... :: NAME=FLAGS ...")
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    cut = rest.index("::")
    cmd, variants = rest[:cut], dict(v.split("=", 1) for v in rest[cut + 1 :])
    runs: dict[str, list[float]] = {"baseline": [], **{n: [] for n in variants}}
    for r in range(a.rounds):
        order = ["baseline", *variants] if r % 2 == 0 else [*reversed(variants), "baseline"]
        for name in order:
            flags = shlex.split(variants.get(name, ""))
            runs[name].append(median_step([*cmd, *flags], a.skip, a.timeout))
            print(f"round {r + 1} {name}: {runs[name][-1]:.2f} ms", flush=True)
    out = {"command": cmd, "rounds": a.rounds, "skip": a.skip, "median_ms": runs, "fixes": {}}
    for name in variants:
        rs = paired_rounds(runs["baseline"], runs[name])
        out["fixes"][name] = {
            "saving_pct": 100 * (1 - rs.ratio),
            "interval_pct": [100 * (1 - rs.ratio_high), 100 * (1 - rs.ratio_low)],
            "p_value": rs.p_value,
            "per_round_pct": [100 * (1 - f / b) for b, f in zip(runs["baseline"], runs[name])],
        }
        print(
            f"{name}: {out['fixes'][name]['saving_pct']:+.1f}% "
            f"[{out['fixes'][name]['interval_pct'][0]:+.1f}, {out['fixes'][name]['interval_pct'][1]:+.1f}] "
            f"p={rs.p_value:.2g}",
            flush=True,
        )
    Path(a.output).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
