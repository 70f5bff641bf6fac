"""The long fuzz run: mutated real inputs through ``dlscope import`` and every command, for a while.

    python bench/fuzz.py --seconds 600 --seed 1 --out /tmp/fuzz.json [--crashes /tmp/fuzz_crashes]

Input kinds: imported traces of every format (Kineto, execution trace, ncu CSV, nsys SQLite,
XSpace .xplane.pb) and damaged profile folders (``profile``: a crash is saved as the folder).
Mutations and the property are tests/fuzz_inputs.py's (the CI test, tests/test_fuzz.py, runs a
few of them). Each input is checked in a forked child (the CLI in-process there, so no
interpreter start-up per command), which a timeout (--timeout, per input) kills. A crash (exit 1,
a traceback, more than one line for an error, a raw ``<script>`` in the report, a timeline that is
not JSON, a hang) saves the input in --crashes and is listed in the results with what broke.
Writes the counts per input kind to --out (JSON) and prints them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import fuzz_inputs  # noqa: E402


def _child(path: str, work: str, conn) -> None:  # type: ignore[no-untyped-def]
    imported, problems = fuzz_inputs.check_input(Path(path), Path(work))
    conn.send((imported, problems))
    conn.close()


def check(path: Path, work: Path, timeout: float) -> tuple[bool, list[str]]:
    """check_input in a forked child, killed after ``timeout`` seconds."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(str(path), str(work), child))
    proc.start()
    child.close()
    if parent.poll(timeout):
        try:
            result = parent.recv()
        except EOFError:
            result = (False, ["the checking process died without an answer"])
        proc.join(10)
    else:
        proc.kill()
        proc.join()
        result = (False, [f"hang: no answer within {timeout:.0f} s"])
    if proc.exitcode not in (0, None) and not result[1]:
        result = (result[0], [f"the checking process exited with {proc.exitcode}"])
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fuzz.json"))
    ap.add_argument("--crashes", type=Path, default=None, help="folder for crashing inputs (default: beside --out)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per input (import and every command)")
    ap.add_argument("--kind", choices=fuzz_inputs.kinds(), default=None, help="only this input kind")
    args = ap.parse_args()
    crashes_dir = args.crashes or args.out.with_name(args.out.stem + "_crashes")
    crashes_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    tried: Counter[str] = Counter()
    imported_n: Counter[str] = Counter()
    how_n: Counter[str] = Counter()
    crashes: list[dict[str, object]] = []
    signatures: dict[str, int] = defaultdict(int)
    t0 = time.monotonic()
    i = 0
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-") as tmp:
        while time.monotonic() - t0 < args.seconds:
            m = fuzz_inputs.mutant(rng, args.kind)
            work = Path(tmp) / f"w{i}"
            work.mkdir()
            path = m.write(work)
            imported, problems = check(path, work, args.timeout)
            tried[m.kind] += 1
            how_n[f"{m.kind}:{m.how}"] += 1
            imported_n[m.kind] += imported
            if problems:
                saved = crashes_dir / f"crash_{i:05d}_{m.kind}{m.suffix}"
                if m.files is None:
                    saved.write_bytes(m.data)
                else:  # the damaged profile folder (its unmutated seed is m.seed in tests/data)
                    shutil.copytree(path, saved, dirs_exist_ok=True)
                sig = problems[0].split(":")[0] + ":" + problems[0][:120]
                signatures[sig] += 1
                crashes.append({"input": str(saved), "kind": m.kind, "seed": m.seed, "how": m.how,
                                "problems": problems})
                print(f"[{time.monotonic() - t0:6.0f} s] CRASH {saved}: {problems[0][:200]}", flush=True)
            shutil.rmtree(work, ignore_errors=True)
            i += 1
    result = {"seconds": round(time.monotonic() - t0, 1), "seed": args.seed, "inputs_tried": sum(tried.values()),
              "tried_per_kind": dict(tried), "imported_per_kind": dict(imported_n),
              "tried_per_mutation": dict(how_n), "crashes": len(crashes),
              "distinct_crashes": len(signatures), "crash_list": crashes}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "crash_list"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
