"""The crash class of fuzz seed 102, swept: each column chunk of the chosen tables of a real profile,
its physical type in the Parquet footer set to other types in turn (the data pages untouched), and
every command of the fuzz property over it (tests/fuzz_inputs.check_input), each case in a forked
child so that an abort is counted, not fatal.

    python bench/footer_type_sweep.py [--profile DIR] [--tables steps,kernels,...] [--columns start_ns,...]
                                      [--types 0,6,63]

Types are Parquet's enum (0 BOOLEAN, 1 INT32, 2 INT64, 6 BYTE_ARRAY; 63 is none). Prints one line
per case and the totals; the exit code is 1 if any case broke the property.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from tests import fuzz_inputs  # noqa: E402

MLP = REPO / "tests" / "data" / "advice_truth_hooks" / "mlp_baseline_default.dlscope"


def type_offsets(data: bytes, columns: list[str]) -> dict[str, int]:
    """Where each column's chunk (first row group) keeps its physical type in the footer. In
    compact Thrift its ColumnMetaData starts: field 1 ``type`` (header 0x15, one zigzag byte),
    field 2 ``encodings`` (header 0x19, a list header ``k << 4 | 5``, k one-byte values), field 3
    ``path_in_schema`` (header 0x19, list header 0x18, the name's length, the name). The schema
    names each column once before the chunks do; columns whose bytes do not fit are left out."""
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    out = {}
    for name in columns:
        path = data.find(name.encode(), data.index(name.encode(), footer) + 1)
        at = path - 1 - 2  # the name's length, the list header, then field 3's header
        if path < 0 or data[at : path - 1] != b"\x19\x18":
            continue
        for k in range(1, 16):
            lst = at - 1 - k  # encodings' list header
            if data[lst] == (k << 4 | 5) and data[lst - 1] == 0x19 and data[lst - 3] == 0x15:
                out[name] = lst - 2
                break
    return out


def check_in_child(profile: Path, work: Path) -> tuple[bool | None, list[str]]:
    """check_input over ``profile`` in a forked child: (opened, problems); a child that dies is a problem."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            os.write(write, json.dumps(fuzz_inputs.check_input(profile, work)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not answer:
        return None, [f"the child died without an answer (wait status {status})"]
    opened, problems = json.loads(answer)
    return opened, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path, default=MLP)
    ap.add_argument("--tables", default="steps,kernels,strings,phases,ops")
    ap.add_argument("--columns", default="", help="only these columns (default: every column)")
    ap.add_argument("--types", default="0,6,63")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="footer-sweep-"))
    shutil.copytree(args.profile, root / "seed.dlscope")  # check_input diffs against it
    (root / "work").mkdir()
    cases = broken = 0
    for table in args.tables.split(","):
        f = args.profile / f"{table}.parquet"
        data = f.read_bytes()
        names = pq.read_metadata(f).schema.names
        only = set(args.columns.split(",")) if args.columns else set(names)
        for column, at in type_offsets(data, [n for n in names if n in only]).items():
            for new in (int(t) for t in args.types.split(",")):
                if data[at] == 2 * new:  # zigzag: the type it has
                    continue
                damaged = bytearray(data)
                damaged[at] = 2 * new
                prof = root / "p.dlscope"
                shutil.rmtree(prof, ignore_errors=True)
                shutil.copytree(args.profile, prof)
                (prof / f.name).write_bytes(bytes(damaged))
                t = time.monotonic()
                opened, problems = check_in_child(prof, root / "work")
                cases += 1
                broken += bool(problems)
                print(
                    f"{table}.{column} -> type {new}: {'opened' if opened else 'refused'}, "
                    f"{time.monotonic() - t:.1f} s, {problems or 'ok'}",
                    flush=True,
                )
    print(f"{cases} cases, {broken} broke the property")
    shutil.rmtree(root, ignore_errors=True)
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
