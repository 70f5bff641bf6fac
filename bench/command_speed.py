"""Benchmark: the wall time of each analysis command on the 504k-event profile, two source trees
alternated in one run (the gate of issue 37: no command slower than at the reference commit).

Imports the 504,712-event Kineto trace of GPT (12 layers, bf16, 40 steps, H100) once with the
first tree, then runs `summary`, `advise`, `report` and `export` (its default type, the timeline)
as the user does: `python -m dlscope ...` in a fresh process, with PYTHONPATH set to each tree's
`src`, alternating the trees run by run. Prints the median of each and the ratio; writes JSON.
With the results cache on (the default, as users run), the first command on the fresh profile
computes the advice and the others read it; `--no-cache` makes every run compute it.

    git worktree add --detach /tmp/ref 5b8010c
    python bench/command_speed.py --tree ref=/tmp/ref --tree now=. [--runs 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402
from reports_speed import find_trace  # noqa: E402

NO_CACHE = False
COMMANDS = {
    "summary": lambda p, out: ["summary", p],
    "advise": lambda p, out: ["advise", p],
    "report": lambda p, out: ["report", p, "-o", str(out / "r.html")],
    "export": lambda p, out: ["export", p, "-o", str(out / "t.json.gz")],
}


def run(tree: Path, args: list[str]) -> float:
    if "-o" in args and args[0] in ("report", "export"):  # the run before's output: trees differ on overwriting
        Path(args[args.index("-o") + 1]).unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    if NO_CACHE:  # each command computes its results (a tree without the results cache always does)
        env["DLSCOPE_NO_CACHE"] = "1"
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dlscope", *args], env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{tree}: dlscope {' '.join(args)} failed: {r.stderr.strip()[-300:]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of a source tree (its src/ is used)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--no-cache",
        action="store_true",
        help="turn the results cache off: every command computes (the first command on a profile)",
    )
    ap.add_argument("--command", action="append", choices=sorted(COMMANDS), help="only these commands (default: all)")
    args = ap.parse_args()
    commands = {c: COMMANDS[c] for c in (args.command or COMMANDS)}
    global NO_CACHE
    NO_CACHE = args.no_cache
    trees = {n: Path(p).resolve() for n, p in (t.split("=", 1) for t in args.tree)}
    trace = args.trace or find_trace()
    if trace is None:
        raise SystemExit("the 504k-event trace is not here (shared/fixtures beside the clone)")
    for tree in trees.values():
        # the bytecode an install compiles (pip writes .pyc at install time): without it each run compiles every
        # module it imports again when PYTHONDONTWRITEBYTECODE is set, as on this machine, a cost no user pays
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")], check=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        profile = str(out / "gpt12.dlscope")
        run(next(iter(trees.values())), ["import", str(trace), "-o", profile])
        times: dict[str, dict[str, list[float]]] = {c: {n: [] for n in trees} for c in commands}
        for cmd, make in commands.items():
            for tree in trees.values():  # one warm-up each (page cache)
                run(tree, make(profile, out))
            for _ in range(args.runs):
                for name, tree in trees.items():
                    times[cmd][name].append(run(tree, make(profile, out)))
    names = list(trees)
    print("| command | " + " | ".join(f"{n} median s" for n in names) + f" | {names[-1]} / {names[0]} |")
    print("|---|" + "---|" * (len(names) + 1))
    result = {
        "machine": machine.describe(),
        "runs": args.runs,
        "results_cache": not args.no_cache,
        "trees": {n: str(p) for n, p in trees.items()},
        "times_s": times,
        "median_s": {},
    }
    for cmd in commands:
        med = {n: statistics.median(times[cmd][n]) for n in names}
        result["median_s"][cmd] = med
        print(f"| {cmd} | " + " | ".join(f"{med[n]:.3f}" for n in names) + f" | {med[names[-1]] / med[names[0]]:.2f} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
