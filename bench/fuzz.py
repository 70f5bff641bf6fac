"""The long fuzz run: mutated real inputs through ``dlscope import`` and every command, for a while.

    python bench/fuzz.py --seconds 600 --seed 1 --out /tmp/fuzz.json [--jobs N] [--crashes /tmp/fuzz_crashes]

Input kinds: imported traces of every format (Kineto, execution trace, ncu CSV, nsys SQLite,
XSpace .xplane.pb) and damaged profile folders (``profile``: a crash is saved as the folder).
Mutations and the property are tests/fuzz_inputs.py's (the CI test, tests/test_fuzz.py, runs a
few of them). Each input is made and checked in a forked child (the CLI in-process there, so no
interpreter start-up per command), which a timeout (--timeout, per input) kills; --jobs children
run at once (default: the CPUs this process may use). A crash (exit 1, a traceback, more than one
line for an error, a raw ``<script>`` in the report, a timeline that is not JSON, a hang) saves
the input in --crashes and is listed in the results with what broke.

The parent is a fork server: before the clock starts it loads every module the children use
(found by checking each kind's unmutated seed once in a child) and blocks pandas as the
``dlscope`` console script does for these commands, so no child pays for imports. Input number
``i`` is mutated with ``random.Random(f"{seed}:{i}")`` (a stable string seed): the inputs of a
seed are the same whatever --jobs is, and a crash is replayed with ``--replay i``. SIGINT or
SIGTERM ends a run early with its counts written.

Writes the counts per input kind, inputs per second and each kind's mean seconds per input (a
child's wall time: making the mutant and checking it) to --out (JSON) and prints them.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import fuzz_inputs  # noqa: E402

CTX = mp.get_context("fork")


def source_fingerprint() -> str:
    """SHA-256 over the code under test (every file of src/dlscope, .py and otherwise, and the
    mutations in tests/fuzz_inputs.py), by relative path: runs made on different machines from the
    same source share it, so bench/fuzz_totals.py can add up the inputs one source survived."""
    h = hashlib.sha256()
    files = sorted(p for p in (REPO / "src" / "dlscope").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for path in [*files, REPO / "tests" / "fuzz_inputs.py"]:
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def input_rng(seed: int, index: int) -> random.Random:
    """The rng of input ``index``: from the run's seed and the index only (str seeds hash stably)."""
    return random.Random(f"{seed}:{index}")


# ---- the fork server's warm-up ------------------------------------------------------------------


def _seed_input(kind: str, folder: Path) -> Path:
    """``kind``'s first seed, unmutated, written as check_input expects it."""
    k, path = next(s for s in fuzz_inputs.SEEDS if s[0] == kind)
    if k in ("profile", "trace_folder"):
        m = fuzz_inputs.Mutant(k, path.name, "none", b"", fuzz_inputs.suffix_of(k), fuzz_inputs.profile_files(path))
    else:
        m = fuzz_inputs.Mutant(k, path.name, "none", fuzz_inputs.seed_bytes(path), fuzz_inputs.suffix_of(k))
    return m.write(folder)


def _modules_used(kind: str, conn) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-warm-") as d:
        fuzz_inputs.check_input(_seed_input(kind, Path(d)), Path(d))
    conn.send(sorted(sys.modules))
    conn.close()


def prewarm(kinds: list[str]) -> int:
    """Load here what the children import: the modules each kind's unmutated seed loads through
    every command (checked in a child each, so that nothing here opens DuckDB or starts a thread
    pool before forking). Fills fuzz_inputs' seed caches too. Returns the modules loaded."""
    from dlscope.cli.no_pandas import block_pandas

    # The console script blocks pandas for every command the property runs (pyarrow then takes
    # its no-pandas path); run in-process, main() leaves that to its caller.
    block_pandas()
    import pyarrow.compute  # noqa: F401 - what the mutations use (fuzz_inputs._wrong_parquet)
    import pyarrow.parquet  # noqa: F401

    for kind, path in fuzz_inputs.SEEDS:  # what mutant() would otherwise read and parse per child
        if kind == "trace_folder":
            fuzz_inputs.trace_folder_files(path)
        elif kind != "profile":
            fuzz_inputs._raw(path)
        if kind in ("kineto", "memory_timeline", "execution_trace") and path not in fuzz_inputs._PARSED:
            fuzz_inputs._PARSED[path] = json.loads(fuzz_inputs._raw(path))
    children = []
    for kind in kinds:
        parent, child = CTX.Pipe(duplex=False)
        proc = CTX.Process(target=_modules_used, args=(kind, child))
        proc.start()
        child.close()
        children.append((parent, proc))
    names: set[str] = set()
    for parent, proc in children:
        if parent.poll(300):
            try:
                names.update(parent.recv())
            except EOFError:
                pass
        proc.kill() if proc.is_alive() else None
        proc.join()
    before = len(sys.modules)
    for name in sorted(names):
        if name in sys.modules or name == "__main__" or name.startswith("pandas"):
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that only imports in its package's own order
            pass
    return len(sys.modules) - before


# ---- one input in a child -----------------------------------------------------------------------


def _child(index: int, seed: int, kind: str | None, work: str, cpu: int | None, conn) -> None:  # type: ignore[no-untyped-def]
    if cpu is not None:  # one CPU per job, as under taskset: DuckDB then runs one thread per query
        os.sched_setaffinity(0, {cpu})
    m = fuzz_inputs.mutant(input_rng(seed, index), kind)
    path = m.write(Path(work))
    conn.send(("input", m.kind, m.seed, m.how, m.suffix, str(path), m.files is not None))
    imported, problems = fuzz_inputs.check_input(path, Path(work))
    conn.send(("done", imported, problems))
    conn.close()


@dataclass
class Job:
    index: int
    seed: int
    kind: str | None
    work: Path
    proc: mp.Process
    conn: mpc.Connection
    cpu: int | None
    started: float
    deadline: float
    info: tuple = ()  # the child's "input" message: kind, seed, how, suffix, path, is_folder
    result: tuple[bool, list[str]] | None = None
    done: bool = False
    seconds: float = 0.0


@dataclass
class Tally:
    tried: Counter[str] = field(default_factory=Counter)
    imported: Counter[str] = field(default_factory=Counter)
    how: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    crashes: list[dict[str, object]] = field(default_factory=list)
    signatures: Counter[str] = field(default_factory=Counter)


def _finish(job: Job, tally: Tally, crashes_dir: Path, t0: float) -> None:
    imported, problems = job.result or (False, ["the checking process died without an answer"])
    if job.proc.exitcode not in (0, None) and not problems:
        problems = [f"the checking process exited with {job.proc.exitcode}"]
    if not job.info:  # died or hung while making the mutant: make it again here to name it
        m = fuzz_inputs.mutant(input_rng(job.seed, job.index), job.kind)
        again = job.work / "again"
        again.mkdir()
        job.info = (m.kind, m.seed, m.how, m.suffix, str(m.write(again)), m.files is not None)
    kind, seed, how, suffix, path, is_folder = job.info
    tally.tried[kind] += 1
    tally.how[f"{kind}:{how}"] += 1
    tally.imported[kind] += imported
    tally.seconds[kind] += job.seconds
    if problems:
        saved = crashes_dir / f"crash_{job.index:06d}_{kind}{suffix}"
        if is_folder:  # the damaged profile folder (its unmutated seed is `seed` in tests/data)
            shutil.copytree(path, saved, dirs_exist_ok=True)
        else:
            shutil.copyfile(path, saved)
        tally.signatures[problems[0].split(":")[0] + ":" + problems[0][:120]] += 1
        tally.crashes.append(
            {"index": job.index, "input": str(saved), "kind": kind, "seed": seed, "how": how, "problems": problems}
        )
        print(f"[{time.monotonic() - t0:6.0f} s] CRASH {saved}: {problems[0][:200]}", flush=True)
    shutil.rmtree(job.work, ignore_errors=True)


class StopFlag:
    """Set by SIGINT or SIGTERM: no new input starts, the running ones finish (or time out), and
    the counts so far are written as at the end of --seconds, so a long run can be cut short."""

    def __init__(self) -> None:
        self.set = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        self.set = True


def run(args: argparse.Namespace, crashes_dir: Path) -> dict[str, object]:
    stop = StopFlag()
    cpus = sorted(os.sched_getaffinity(0))
    tally = Tally()
    running: dict[mpc.Connection, Job] = {}
    free_cpus = list(cpus) if args.pin else []
    t0 = time.monotonic()
    i = args.replay if args.replay is not None else 0
    last = args.replay
    with tempfile.TemporaryDirectory(prefix="dlscope-fuzz-") as tmp:
        while True:
            now = time.monotonic()
            while len(running) < args.jobs and now - t0 < args.seconds and not stop.set and (last is None or i <= last):
                work = Path(tmp) / f"w{i}"
                work.mkdir()
                cpu = free_cpus.pop(0) if free_cpus else None
                parent, child = CTX.Pipe(duplex=False)
                proc = CTX.Process(target=_child, args=(i, args.seed, args.kind, str(work), cpu, child))
                proc.start()
                child.close()
                running[parent] = Job(i, args.seed, args.kind, work, proc, parent, cpu, now, now + args.timeout)
                i += 1
            if not running:
                break
            wait = max(0.0, min(j.deadline for j in running.values()) - time.monotonic())
            for conn in mpc.wait(list(running), timeout=wait):
                job = running[conn]
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    job.done = True
                else:
                    if msg[0] == "input":  # the mutant is written: the timeout counts from here
                        job.info = msg[1:]
                        job.deadline = time.monotonic() + args.timeout
                    else:
                        job.result, job.done = (msg[1], msg[2]), True
            now = time.monotonic()
            for conn, job in list(running.items()):
                if not job.done and now < job.deadline:
                    continue
                if not job.done:  # a hang
                    job.proc.kill()
                    job.result = (False, [f"hang: no answer within {args.timeout:.0f} s"])
                job.proc.join(10)
                if job.proc.is_alive():
                    job.proc.kill()
                    job.proc.join()
                conn.close()
                job.seconds = now - job.started
                del running[conn]
                if job.cpu is not None:
                    free_cpus.append(job.cpu)
                _finish(job, tally, crashes_dir, t0)
    seconds = time.monotonic() - t0
    n = sum(tally.tried.values())
    tally.crashes.sort(key=lambda c: c["index"])  # type: ignore[arg-type, return-value]
    source = source_fingerprint()
    if source != args.source:  # a child that imported late may have run either source
        source = f"changed during the run: {args.source} then {source}"
    return {
        "source": source,
        "seconds": round(seconds, 1),
        "seed": args.seed,
        "jobs": args.jobs,
        "stopped_early": stop.set,
        "inputs_tried": n,
        "inputs_per_second": round(n / seconds, 2) if seconds else None,
        "tried_per_kind": dict(tally.tried),
        "imported_per_kind": dict(tally.imported),
        "mean_input_seconds_per_kind": {k: round(tally.seconds[k] / c, 3) for k, c in tally.tried.items()},
        "tried_per_mutation": dict(tally.how),
        "crashes": len(tally.crashes),
        "distinct_crashes": len(tally.signatures),
        "crash_list": tally.crashes,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path("/tmp/fuzz.json"))
    ap.add_argument("--crashes", type=Path, default=None, help="folder for crashing inputs (default: beside --out)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per input (import and every command)")
    ap.add_argument("--kind", choices=fuzz_inputs.kinds(), default=None, help="only this input kind")
    ap.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="inputs checked at once, each in its own child (default: the CPUs this process may use)",
    )
    ap.add_argument(
        "--pin", action="store_true", help="give each job a CPU of its own (sched_setaffinity, as taskset would)"
    )
    ap.add_argument(
        "--replay",
        type=int,
        default=None,
        metavar="I",
        help="check input number I of --seed (and --kind) only, e.g. a crash's 'index'",
    )
    args = ap.parse_args()
    args.jobs = max(1, args.jobs)
    if args.replay is not None:
        args.seconds = float("inf")
    crashes_dir = args.crashes or args.out.with_name(args.out.stem + "_crashes")
    crashes_dir.mkdir(parents=True, exist_ok=True)
    args.source = source_fingerprint()
    t = time.monotonic()
    loaded = prewarm([args.kind] if args.kind else fuzz_inputs.kinds())
    print(f"fork server: {loaded} modules loaded in {time.monotonic() - t:.1f} s", flush=True)
    result = run(args, crashes_dir)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("crash_list", "tried_per_mutation")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
