"""``dlscope try`` against ``measure.py`` on the same fix, measured back to back on one machine
(``bash bench/gpu_run.sh try_vs_measure``; issue 22).

    python3 bench/advice_truth/try_vs_measure.py steps /tmp/try_gpt -o try_gpt_workers_steps.json
    python3 bench/advice_truth/try_vs_measure.py table bench/advice_truth/results/try_vs_measure.tar.gz

``steps``: every run's untraced step times (ms) from the profiles ``dlscope try`` left in its folder
(``LABEL.ROUND.dlscope``; ``baseline.0`` is the profiled first run).

``table``: one row per (program, fix): try's saving of the median step with its 95% interval; the
same recomputed from the runs' steps without the profiled run, and try's mean-step saving;
measure.py's saving for the try-fix variant (the median over rounds of the block-mean step, as
the suite reports it, with the range of the per-round savings) and of its median step (try's
statistic), and the suite's own variant for that problem. ``agree``: try's interval overlaps the
range of measure.py's per-round savings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

# (model, try fix, measure.py variant that is the same change, the suite's variant for the problem)
PAIRS = [
    ("gpt", "workers", "workers_fix", "workers"),
    ("mlp", "compile_graphs", "compile_graphs_fix", "compile"),
    ("cnn", "bf16", "bf16_fix", "bf16"),
]
SUITE_OF = {"workers": "workers", "compile_graphs": "compile", "compile": "compile", "bf16": "bf16"}


def run_steps(folder: Path) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from dlscope.analysis.core.context import ProfileData

    runs = []
    for p in sorted(folder.glob("*.dlscope")):
        label, rnd = p.name[: -len(".dlscope")].rsplit(".", 1)
        try:
            d = ProfileData.open(p)
            ms = [
                r[0]
                for r in d.con.execute(
                    "SELECT (end_ns - start_ns) / 1e6 FROM stat_steps WHERE rank = (SELECT min(rank) FROM stat_steps) "
                    "ORDER BY step"
                ).fetchall()
            ]
        except Exception as e:  # noqa: BLE001 - a run without a readable profile is listed empty
            ms = []
            print(f"{p}: {e}", file=sys.stderr)
        runs.append(
            {
                "label": label,
                "round": int(rnd),
                "profiled": label == "baseline" and rnd == "0",
                "steps_ms": [round(x, 3) for x in ms],
            }
        )
    return {"folder": str(folder), "runs": runs}


def _saving(base: float, fixed: float) -> float:
    return 100.0 * (1 - fixed / base)


def row(d: Path, model: str, fix: str, variant: str, suite: str) -> dict | None:
    tj, sj, mj = d / f"try_{model}_{fix}.json", d / f"try_{model}_{fix}_steps.json", d / f"measure_{model}.json"
    r: dict = {"program": model, "fix": fix}
    if tj.exists() and tj.stat().st_size:
        f = json.loads(tj.read_text())["fixes"][0]
        r["try_pct"], r["try_ci"] = f.get("measured_saving_pct"), f.get("measured_interval_pct")
        r["try_base_ms"], r["try_fixed_ms"], r["significant"] = (
            f.get("baseline_ms"),
            f.get("fixed_ms"),
            f.get("significant"),
        )
    if sj.exists():
        runs = json.loads(sj.read_text())["runs"]
        base = [s for x in runs if x["label"] == "baseline" and not x["profiled"] for s in x["steps_ms"]]
        fixed = [s for x in runs if x["label"] == fix for s in x["steps_ms"]]
        if base and fixed:
            r["try_unprofiled_pct"] = _saving(statistics.median(base), statistics.median(fixed))
            r["try_mean_pct"] = _saving(statistics.fmean(base), statistics.fmean(fixed))
            r["try_run_medians"] = {
                x["label"] + "." + str(x["round"]): round(statistics.median(x["steps_ms"]), 2)
                for x in runs
                if x["steps_ms"]
            }
    if mj.exists():
        v = json.loads(mj.read_text())["variants"]
        b = v.get("baseline")
        for name, key in ((variant, "m"), (suite, "suite")):
            x = v.get(name)
            if not (b and x):
                continue
            per_round = [_saving(bb, xx) for bb, xx in zip(b["rounds_ms"], x["rounds_ms"])]
            r[f"{key}_pct"], r[f"{key}_range"] = x["saving_pct"], [min(per_round), max(per_round)]
            r[f"{key}_ms"], r[f"{key}_base_ms"] = x["step_ms"], b["step_ms"]
            if "median_saving_pct" in x:
                n = x["block_steps"]
                med = [
                    _saving(statistics.median(b["steps_ms"][i : i + n]), statistics.median(x["steps_ms"][i : i + n]))
                    for i in range(0, min(len(b["steps_ms"]), len(x["steps_ms"])), n)
                ]
                r[f"{key}_median_pct"], r[f"{key}_median_range"] = x["median_saving_pct"], [min(med), max(med)]
    if len(r) == 2:
        return None
    if r.get("try_ci") and r.get("m_range"):
        lo, hi = r["try_ci"]
        rng = [
            min(r["m_range"] + r.get("m_median_range", r["m_range"])),
            max(r["m_range"] + r.get("m_median_range", r["m_range"])),
        ]
        r["agree"] = lo <= rng[1] and hi >= rng[0]
    return r


def fmt(r: dict) -> str:
    def pct(k: str) -> str:
        return "" if r.get(k) is None else f"{r[k]:.1f}%"

    def rng(k: str) -> str:
        return "" if not r.get(k) else f" ({r[k][0]:.1f}..{r[k][1]:.1f})"

    ci = f" [{r['try_ci'][0]:.1f}, {r['try_ci'][1]:.1f}]" if r.get("try_ci") else ""
    ms = f"{r['try_base_ms']:.2f} -> {r['try_fixed_ms']:.2f}" if r.get("try_fixed_ms") else ""
    mms = f"{r['m_base_ms']:.2f} -> {r['m_ms']:.2f}" if r.get("m_ms") else ""
    return (
        f"| {r['program']} | {r['fix']} | {pct('try_pct')}{ci} | {pct('try_unprofiled_pct')} | {pct('try_mean_pct')} |"
        f" {ms} | {pct('m_pct')}{rng('m_range')} | {pct('m_median_pct')}{rng('m_median_range')} | {mms} |"
        f" {pct('suite_pct')}{rng('suite_range')} | {'' if r.get('agree') is None else 'yes' if r['agree'] else 'no'} |"
    )


HEAD = (
    "| program | fix | try: median-step saving [95%] | try w/o profiled run | try mean step | try ms (base -> fix) "
    "| measure.py, same fix: block mean (rounds) | measure.py median step (rounds) | measure.py ms (base -> fix) "
    "| suite's variant (rounds) | agree |\n|" + "---|" * 11
)


def table(src: Path) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        d = src
        if src.is_file():
            with tarfile.open(src) as t:
                t.extractall(tmp, filter="data")
            found = sorted(Path(tmp).rglob("measure_*.json")) + sorted(Path(tmp).rglob("try_*.json"))
            d = found[0].parent if found else Path(tmp)
        pairs = list(PAIRS)
        for j in sorted(d.glob("try_*.json")):  # any other (model, fix) the folder holds
            if not j.name.endswith("_steps.json"):
                m, fix = j.stem[len("try_") :].split("_", 1)
                if not any(p[:2] == (m, fix) for p in pairs):
                    pairs.append((m, fix, f"{fix}_fix", SUITE_OF.get(fix, fix)))
        return [r for m, f, v, s in pairs if (r := row(d, m, f, v, s))]


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("steps")
    s.add_argument("folder", type=Path)
    s.add_argument("-o", "--output", type=Path, required=True)
    t = sub.add_parser("table")
    t.add_argument("source", type=Path, help="the results tar.gz, or a folder of its files")
    t.add_argument("--format", choices=("md", "json"), default="md")
    a = ap.parse_args()
    if a.cmd == "steps":
        a.output.write_text(json.dumps(run_steps(a.folder)))
        return 0
    rows = table(a.source)
    print(json.dumps(rows, indent=1) if a.format == "json" else "\n".join([HEAD, *map(fmt, rows)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
