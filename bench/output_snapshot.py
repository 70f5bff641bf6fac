"""Every command's JSON output on every real input, to prove that a change of structure changes no output.

    python bench/output_snapshot.py take OUT_DIR [--only SUBSTRING]   # with the sources to snapshot on PYTHONPATH
    python bench/output_snapshot.py compare BEFORE_DIR AFTER_DIR      # one line per input and command that differ

Inputs: the fixtures' traces (../shared/fixtures), every file of HTA's corpus (../shared/corpus/hta, else the
part bundled in tests/data), and the profiles stored in tests/data (the advice suite's GPU profiles among them).
For each input, `take` imports it once (a trace) and records, as `dlscope` prints them:
`stats --report all --format json`, `advise --format json`, `summary --format json`,
`diff P P --format json` and `check P --baseline P` (exit code and output), each in-process through
`dlscope.cli.main`. Exit codes and one-line errors are part of the record, so an input that is refused must
stay refused the same way. Paths under OUT_DIR are written as `<OUT>` so two snapshots compare.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = next(
    (p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared"
)


def inputs() -> list[tuple[str, Path]]:
    """(stable id, path) of every input, in a fixed order."""
    found: list[tuple[str, Path]] = []
    fixtures = SHARED / "fixtures" / "gpu"
    for p in sorted(fixtures.glob("*")):
        if p.name.endswith((".trace.json.gz", ".sqlite.gz", ".csv")) and "nvml" not in p.name:
            found.append((f"fixtures/{p.name}", p))
    corpus = SHARED / "corpus" / "hta"
    if not corpus.is_dir():
        corpus = REPO / "tests" / "data" / "hta_corpus"
    for p in sorted(corpus.rglob("*")):
        if p.is_file() and p.suffix not in (".py", ".md"):
            found.append((f"hta/{p.relative_to(corpus)}", p))
    for p in sorted((REPO / "tests" / "data").rglob("*.dlscope")):
        if (p / "meta.json").is_file():
            found.append((f"data/{p.relative_to(REPO / 'tests' / 'data')}", p))
    return found


def run_cli(args: list[str]) -> dict[str, object]:
    """One command in this process: its exit code, stdout (parsed when JSON) and stderr."""
    from dlscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
        except Exception as e:  # noqa: BLE001 - a crash is part of the record
            code, err = 99, io.StringIO(f"crash: {type(e).__name__}: {e}")
    text = out.getvalue()
    try:
        parsed: object = json.loads(text)
    except ValueError:
        parsed = text
    return {"code": code, "out": parsed, "err": err.getvalue().strip()}


COMMANDS = {
    "stats": lambda p: ["stats", p, "--report", "all", "--format", "json"],
    "advise": lambda p: ["advise", p, "--format", "json"],
    "summary": lambda p: ["summary", p, "--format", "json"],
    "diff": lambda p: ["diff", p, p, "--format", "json"],
    "check": lambda p: ["check", p, "--baseline", p],
}


def take(out_dir: Path, only: str | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    profiles = out_dir / "profiles"
    profiles.mkdir(exist_ok=True)
    for key, path in inputs():
        if only and only not in key:
            continue
        record: dict[str, object] = {"input": key}
        t0 = time.perf_counter()
        if path.suffix == ".dlscope":
            target = str(path)
        else:
            target = str(profiles / (key.replace("/", "__") + ".dlscope"))
            record["import"] = run_cli(["import", str(path), "-o", target])
        if Path(target).is_dir():
            for name, make in COMMANDS.items():
                record[name] = run_cli(make(target))
        text = json.dumps(record, indent=1, sort_keys=True, default=str)
        text = text.replace(str(out_dir.resolve()), "<OUT>").replace(str(out_dir), "<OUT>")
        (out_dir / (key.replace("/", "__") + ".json")).write_text(text)
        print(f"{time.perf_counter() - t0:7.1f} s  {key}", flush=True)


def differences(a: object, b: object, where: str = "") -> list[str]:
    """Where two JSON values differ: exactly, but for floats, which may differ in their last bits
    (within 1e-9 relative) because DuckDB's parallel aggregates add in no fixed order."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for k in sorted(set(a) | set(b)):
            found += differences(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{where}.{k}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)) or isinstance(b, float) and isinstance(a, (int, float)):
        # DuckDB's parallel sums add in no fixed order: the last bits of a float vary run to run
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else [f"{where}: {a!r} -> {b!r}"]
    return [] if a == b else [f"{where}: {str(a)[:120]!r} -> {str(b)[:120]!r}"]


# values that differ between two runs of the same code: wall-clock readings of the command itself
VOLATILE = ("import.err", "elapsed", "dlscope_version", "created")


def compare(before: Path, after: Path) -> int:
    changed = 0
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    for name in names:
        a = json.loads((before / name).read_text()) if (before / name).exists() else {}
        b = json.loads((after / name).read_text()) if (after / name).exists() else {}
        diffs = [d for d in differences(a, b) if not any(v in d.split(":")[0] for v in VOLATILE)]
        if diffs:
            changed += 1
            print(f"{name}: {len(diffs)} difference(s)")
            for d in diffs[:8]:
                print(f"   {d}")
    print(f"{len(names)} inputs compared, {changed} with differences")
    return 1 if changed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("take")
    t.add_argument("out_dir", type=Path)
    t.add_argument("--only")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.what == "take":
        take(args.out_dir, args.only)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
