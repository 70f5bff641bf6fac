"""The two-launch job against the one-launch job, over the rounds of ``bench/gpu_run.sh two_launch``.

    python bench/advice_truth/two_launch_table.py bench/advice_truth/results/dist6_x4

Reads each round's ``oneN_*.json`` and ``twoN_*.json`` (``dlscope stats --report comm_sum`` and
``collective_overlap``, JSON, written on the GPU host) and prints, for every GPU collective kind and
size, its ``transfer_us`` per round and the mean over the rounds of each launch style, then the
job's overlap the same way. Which rank arrives last, and with it every wait, changes from run to run,
so one pair of runs can differ by more than the two styles do: the comparison is of the means,
with the one-launch runs' own spread beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _rounds(folder: Path, style: str) -> list[int]:
    return sorted(int(p.name[len(style) :].split("_")[0]) for p in folder.glob(f"{style}*_comm_sum.json"))


def _comm(folder: Path, name: str) -> dict[tuple[str, int], float]:
    rows = json.loads((folder / f"{name}_comm_sum.json").read_text())
    return {
        (r["operation"], r["size_bytes"]): r["transfer_us"]
        for r in rows
        if r["where"] == "gpu" and r["operation"] == "allreduce" and r.get("transfer_us") is not None
    }


def _overlap(folder: Path, name: str) -> dict[str, float]:
    rows = json.loads((folder / f"{name}_collective_overlap.json").read_text())
    return next(r for r in rows if r["operation"] == "(all)")


def _spread(values: list[float]) -> str:
    return f"{min(values):.1f}..{max(values):.1f}"


def main(folder: Path) -> None:
    styles = {s: _rounds(folder, s) for s in ("one", "two")}
    comm = {s: [_comm(folder, f"{s}{r}") for r in rounds] for s, rounds in styles.items()}
    print("| all-reduce | one launch, us per round | two launches, merged | mean one -> two | difference |")
    print("|---|---|---|---|---|")
    for key in sorted(set.intersection(*(set(c) for cs in comm.values() for c in cs)), key=lambda k: k[1]):
        one = [c[key] for c in comm["one"]]
        two = [c[key] for c in comm["two"]]
        m1, m2 = statistics.mean(one), statistics.mean(two)
        print(
            f"| {key[1] / 2**20:.1f} MiB | {', '.join(f'{v:.1f}' for v in one)} | "
            f"{', '.join(f'{v:.1f}' for v in two)} | {m1:.1f} -> {m2:.1f} | {100 * (m2 / m1 - 1):+.1f}% |"
        )
    ov = {s: [_overlap(folder, f"{s}{r}") for r in rounds] for s, rounds in styles.items()}
    print()
    print("| collective_overlap | one launch, per round | two launches, merged | mean one -> two | difference |")
    print("|---|---|---|---|---|")
    for col in ("transfer_ms", "overlap_pct", "exposed_ms"):
        one = [r[col] for r in ov["one"]]
        two = [r[col] for r in ov["two"]]
        m1, m2 = statistics.mean(one), statistics.mean(two)
        print(
            f"| {col} | {', '.join(f'{v:.2f}' for v in one)} ({_spread(one)}) | {', '.join(f'{v:.2f}' for v in two)} | "
            f"{m1:.2f} -> {m2:.2f} | {100 * (m2 / m1 - 1):+.1f}% |"
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
