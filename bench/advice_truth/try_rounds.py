"""Re-read stored ``dlscope try --format json`` results with the rounds' test: each round's fixed
run against that round's baseline run (Student's t over the log ratios of their medians, as
``dlscope try`` now measures), next to what the stored result said when it was made.

    python bench/advice_truth/try_rounds.py bench/advice_truth/results/try/*.json ...

Prints a Markdown table: file, fix, per-round savings, the stored saving (pooled median step) and
interval, the rounds' interval and p, and the verdict now (significant: the steps' Mann-Whitney
test, stored, and the rounds' test both under 0.05).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from dlscope.analysis.compare.significance import ALPHA, paired_rounds  # noqa: E402


def rows(path: Path) -> list[str]:
    d = json.loads(path.read_text())
    runs = d.get("runs") or []
    base = {r["round"]: r["median_ms"] for r in runs if r["label"] == "baseline" and r.get("median_ms")}
    out = []
    for fx in d.get("fixes", []) + ([d["combined"]] if d.get("combined") else []):
        if not fx.get("applied") or fx.get("measured_saving_pct") is None:
            continue
        label = fx["name"]
        pairs = [
            (base[r["round"]], r["median_ms"])
            for r in runs
            if r["label"] == label and r.get("median_ms") and r["round"] in base
        ]
        per = ", ".join(f"{100 * (1 - b / a):+.1f}" for a, b in pairs)
        stored = fx.get("measured_interval_pct") or [float("nan")] * 2
        if len(pairs) >= 2:
            rs = paired_rounds([a for a, _ in pairs], [b for _, b in pairs])
            lo, hi, p = 100 * (1 - rs.ratio_high), 100 * (1 - rs.ratio_low), rs.p_value
            sig = (fx.get("p_value") or 1.0) < ALPHA and p < ALPHA
            now = f"[{lo:+.1f}, {hi:+.1f}] p={p:.2g}"
        else:
            sig, now = fx.get("significant"), "one round"
        out.append(
            f"| {path.parent.name}/{path.name} | {label} | {per} | {fx['measured_saving_pct']:+.1f}% "
            f"[{stored[0]:+.1f}, {stored[1]:+.1f}] {'yes' if fx.get('significant') else 'no'} | {now} "
            f"| {'yes' if sig else 'no'} |"
        )
    return out


def main(argv: list[str]) -> int:
    print(
        "| result | fix | each round's saving (%) | stored: saving [interval] significant | rounds: t interval, p |"
        " significant now |"
    )
    print("|---|---|---|---|---|---|")
    for a in argv:
        if not a.endswith("_steps.json"):
            for r in rows(Path(a)):
                print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
