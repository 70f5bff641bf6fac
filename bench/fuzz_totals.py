"""Inputs and crashes per source: the fuzz runs' JSON (bench/fuzz.py --out) added up by the source
fingerprint each run recorded, so "N inputs, zero crashes at one source" is read off, not summed by hand.

    python bench/fuzz_totals.py bench/fuzz_results/*.json

Runs written before the fingerprint existed are grouped as "unrecorded"; a run whose source changed
while it ran is its own group and never counts toward a source.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def totals(paths: list[Path]) -> dict[str, dict[str, object]]:
    """Per source: the runs (file names), inputs tried, crashes, and inputs tried per input kind."""
    groups: dict[str, dict[str, object]] = {}
    for path in paths:
        run = json.loads(path.read_text())
        source = run.get("source") or "unrecorded"
        group = groups.setdefault(source, {"runs": [], "inputs_tried": 0, "crashes": 0, "tried_per_kind": Counter()})
        group["runs"].append(path.name)  # type: ignore[union-attr]
        group["inputs_tried"] += run["inputs_tried"]  # type: ignore[operator]
        group["crashes"] += run["crashes"]  # type: ignore[operator]
        group["tried_per_kind"].update(run["tried_per_kind"])  # type: ignore[union-attr]
    for group in groups.values():
        group["tried_per_kind"] = dict(sorted(group["tried_per_kind"].items()))  # type: ignore[union-attr]
    return groups


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="bench/fuzz.py --out files")
    args = ap.parse_args()
    for source, group in sorted(totals(args.runs).items(), key=lambda kv: -kv[1]["inputs_tried"]):  # type: ignore[operator]
        print(
            f"source {source}: {group['inputs_tried']:,} inputs, {group['crashes']} crashes, "
            f"runs {', '.join(group['runs'])}"
        )  # type: ignore[arg-type]
        print("  per kind: " + ", ".join(f"{k} {n:,}" for k, n in group["tried_per_kind"].items()))  # type: ignore[union-attr]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
