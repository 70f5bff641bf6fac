"""Mutated inputs for the fuzzer (tests/test_fuzz.py, bench/fuzz.py), and the property they must keep.

Seeds are real traces from ``tests/data/`` (small ones). A mutation takes a seed and a
``random.Random`` (hypothesis' ``st.randoms()`` in the tests, so failures shrink and replay;
a plain seeded one in the long run) and gives the bytes of a file to import:

* byte level, any format: truncate, flip bytes, delete or duplicate a range, splice in a piece
  of another seed;
* Kineto JSON, structure-aware: drop, retype or duplicate fields and events, extreme values
  (1e300, -1, huge ints), hostile strings (control characters, ``<script>``, quotes);
* nsys SQLite, structure-aware: NULL or swapped times, hostile names, dropped tables;
* XSpace ``.xplane.pb`` (JAX/TensorFlow profiler), structure-aware: walking the protobuf's nested
  messages to one field, a number made extreme (past int32, int64, 64 bits), a text made hostile, a
  field dropped, duplicated or given another wire type;
* execution traces, structure-aware: a node's field dropped, retyped or extreme (``rf_id``,
  ``id``, ``parent``, inputs), hostile names, nodes dropped or duplicated, top-level fields retyped;
* Nsight Compute CSV, structure-aware: a cell made extreme or hostile (``1e400``, an id past
  int32, a thousands separator), a column dropped or its name changed, rows dropped or duplicated;
* PyTorch memory timelines (``[[time, action, bytes, category], ...]``), structure-aware: a cell
  retyped, extreme or hostile, a row cut short or lengthened, rows dropped or duplicated;
* folders of traces imported as one input (kind ``trace_folder``): per-rank Kineto traces, and a
  Kineto trace with its execution trace; one or two files mutated as their format is (structure
  or bytes), a file dropped, emptied, or copied under another name (two files of one rank);

each written gzipped or not (XSpace files never: the profiler writes them plain). A damaged
profile folder (kind ``profile``, seeds: small real profiles) is a mutant of its own: a Parquet
file or ``meta.json`` truncated or with flipped bytes, a table's file deleted or emptied,
``meta.json`` valid JSON of the wrong shape (a list, a field of the wrong type, a huge
``format_version``), a Parquet file replaced by valid Parquet with the wrong columns or types.
:func:`check_input` runs ``dlscope import`` on it and, when that
succeeded, every command over the profile, and returns what broke the property (see
docs/DEVELOPING.md, Errors): exit 0, or exit 2 with exactly one line on stderr; never exit 1
or a traceback; no raw ``<script>`` in the HTML report; an exported timeline that is valid JSON.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "hta_corpus"

# (kind, file): small real inputs of each format. Kineto seeds are structure-mutated as JSON.
SEEDS: list[tuple[str, Path]] = [
    ("kineto", CORPUS / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"),
    ("kineto", CORPUS / "triton_example" / "triton_example.json.gz"),
    ("kineto", CORPUS / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz"),
    ("kineto", CORPUS / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
    ("kineto", CORPUS / "execution_trace" / "benchmark_simple_add_trace.json.gz"),
    ("execution_trace", CORPUS / "execution_trace" / "benchmark_simple_add_et.json.gz"),
    ("ncu", DATA / "gpu" / "h100_ncu_gemm.csv"),
    ("nsys", DATA / "nsys" / "h100_nsys_mlp.sqlite.gz"),
    ("xplane", DATA / "tf" / "cpu_session" / "plugins" / "profile" / "2026_11_25_02_10_03" / "vm.xplane.pb"),
    ("xplane", DATA / "tf" / "cpu_keras" / "plugins" / "profile" / "2026_11_25_01_28_30" / "vm.xplane.pb"),
    ("xplane", DATA / "jax" / "cpu_mlp" / "plugins" / "profile" / "2026_11_25_01_28_24" / "vm.xplane.pb"),
    ("memory_timeline", CORPUS / "memory_analysis" / "memory_timeline.raw.gz"),
    # folders imported as one input, mutated file by file: per-rank Kineto traces (ranks 0 and 1,
    # HTA's sampled traces), and a Kineto trace with its execution trace (the shapes joined by rf_id)
    ("trace_folder", CORPUS / "trace_filter"),
    ("trace_folder", CORPUS / "execution_trace"),
    # profile folders (NAME.dlscope/), mutated file by file (mutate_profile)
    ("profile", DATA / "advice_truth_hooks" / "mlp_baseline_default.dlscope"),
    ("profile", DATA / "phase_gpu" / "gpt2_baseline.dlscope"),
]

HOSTILE_STRINGS = [
    "<script>alert(1)</script>",
    '"><script>alert(1)</script>',
    "</style><script>x</script>",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "line\nbreak\r\n",
    "tab\there",
    '"quoted"',
    "back\\slash",
    "'single'",
    "\u202eevil",
    "\ud7ff\uffff",
    "ProfilerStep#",
    "ProfilerStep#999999999999",
    "",
    " ",
    "x" * 5000,
    '{"json": 1}',
    "NaN",
    "%s%n%x",
    "${jndi:x}",
]
EXTREME_NUMBERS: list[object] = [
    1e300,
    -1e300,
    -1,
    0,
    2**63,
    2**63 - 1,
    -(2**63),
    2**64,
    10**30,
    0.5,
    1e-300,
    -0.0,
    123456789012345678901234567890,
]
FIELDS = ["ts", "dur", "ph", "cat", "name", "pid", "tid", "args", "id"]
ARG_FIELDS = [
    "External id",
    "correlation",
    "device",
    "stream",
    "grid",
    "block",
    "bytes",
    "Input Dims",
    "Sequence number",
    "Total Allocated",
    "Device Id",
    "Collective name",
    "In msg nelems",
]


def kinds() -> list[str]:
    return sorted({k for k, _ in SEEDS})


def seed_bytes(path: Path) -> bytes:
    """The seed's content, decompressed."""
    return stored_bytes(path.read_bytes())


def stored_bytes(raw: bytes) -> bytes:
    """Content as stored, decompressed where gzipped (left as it is where the gzip is damaged)."""
    try:
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError):
        return raw


def suffix_of(kind: str) -> str:
    return {
        "kineto": ".json",
        "execution_trace": ".json",
        "ncu": ".csv",
        "nsys": ".sqlite",
        "xplane": ".xplane.pb",
        "memory_timeline": ".raw.json",
        "trace_folder": "",
        "profile": ".dlscope",
    }[kind]


# ---- byte level -------------------------------------------------------------------------------


def mutate_bytes(data: bytes, rng: random.Random, others: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    """One to three byte-level edits."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        op = rng.choice(["truncate", "flip", "delete", "duplicate", "splice", "insert"])
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 64))
        if op == "truncate":
            del b[i:]
        elif op == "flip":
            for _ in range(rng.randint(1, 8)):
                k = rng.randrange(len(b))
                b[k] ^= 1 << rng.randrange(8)
        elif op == "delete":
            del b[i:j]
        elif op == "duplicate":
            b[j:j] = b[i:j]
        elif op == "splice" and others:
            other = rng.choice(list(others))
            if other:
                k = rng.randrange(len(other))
                b[i:i] = other[k : k + rng.randint(1, 256)]
        else:
            b[i:i] = rng.choice([b"{", b"}", b"[", b"]", b",", b'"', b"\\", b"\x00", b"\xff\xfe", b"null", b"1e400"])
    return bytes(b)


# ---- Kineto JSON -------------------------------------------------------------------------------


def _events(doc: object) -> list:
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return doc["traceEvents"]
    if isinstance(doc, list):
        return doc
    return []


def _hostile_value(rng: random.Random) -> object:
    return rng.choice(
        [
            None,
            True,
            "",
            "abc",
            "12.5",
            [],
            [1, 2],
            {},
            {"a": 1},
            rng.choice(HOSTILE_STRINGS),
            rng.choice(EXTREME_NUMBERS),
        ]
    )


def mutate_kineto(doc: object, rng: random.Random) -> object:
    """One to four structure-aware edits of a parsed trace (a copy)."""
    doc = copy.deepcopy(doc)
    evs = _events(doc)
    for _ in range(rng.randint(1, 4)):
        if not evs:
            break
        op = rng.choice(
            [
                "drop_field",
                "drop_field_many",
                "retype",
                "extreme",
                "hostile_name",
                "hostile_arg",
                "drop_events",
                "duplicate_events",
                "shuffle",
                "retype_args",
                "metadata",
            ]
        )
        ev = rng.choice(evs)
        if op == "drop_field" and isinstance(ev, dict):
            ev.pop(rng.choice(FIELDS), None)
        elif op == "drop_field_many":
            # a field missing from a share of the events (the "a third have no ts" case)
            field, every = rng.choice(FIELDS), rng.randint(2, 5)
            for k, e in enumerate(evs):
                if k % every == 0 and isinstance(e, dict):
                    e.pop(field, None)
        elif op == "retype" and isinstance(ev, dict):
            ev[rng.choice(FIELDS)] = _hostile_value(rng)
        elif op == "extreme" and isinstance(ev, dict):
            ev[rng.choice(["ts", "dur", "pid", "tid"])] = rng.choice(EXTREME_NUMBERS)
        elif op == "hostile_name":
            for e in rng.sample(evs, min(len(evs), rng.randint(1, 20))):
                if isinstance(e, dict):
                    e["name"] = rng.choice(HOSTILE_STRINGS)
        elif op == "hostile_arg" and isinstance(ev, dict):
            args = ev.setdefault("args", {})
            if isinstance(args, dict):
                args[rng.choice(ARG_FIELDS)] = _hostile_value(rng)
        elif op == "retype_args" and isinstance(ev, dict):
            ev["args"] = _hostile_value(rng)
        elif op == "drop_events":
            k = rng.randrange(len(evs))
            del evs[k : k + rng.randint(1, max(1, len(evs) // 3))]
        elif op == "duplicate_events":
            k = rng.randrange(len(evs))
            evs[k:k] = copy.deepcopy(evs[k : k + rng.randint(1, 50)])
        elif op == "shuffle":
            rng.shuffle(evs)
        elif op == "metadata" and isinstance(doc, dict):
            doc[
                rng.choice(
                    ["baseTimeNanoseconds", "distributedInfo", "deviceProperties", "displayTimeUnit", "schemaVersion"]
                )
            ] = _hostile_value(rng)
    return doc


# ---- XSpace protobufs ----------------------------------------------------------------------------

# numbers a varint field is set to: past int32, int64 and 64 bits (the last encodes as a varint
# too long for any reader), and the ordinary edge values
EXTREME_VARINTS = [0, 1, 2**31, 2**32 - 1, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**70]


def _pb_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | 0x80 if v else b)
        if not v:
            return bytes(out)


def _pb_field(num: int, wt: int, value: object) -> bytes:
    key = _pb_varint(num << 3 | wt)
    if wt == 0:
        return key + _pb_varint(value)  # type: ignore[arg-type]
    if wt == 2:
        return key + _pb_varint(len(value)) + value  # type: ignore[arg-type]
    return key + value  # type: ignore[operator]  # fixed64 and fixed32: their bytes


def _pb_edit(buf: bytes, rng: random.Random, depth: int) -> bytes:
    """``buf`` (a message) with one field edited: a length-delimited field is walked into as a
    message where it parses as one (to depth 8), else the field itself is edited. ValueError
    where ``buf`` is not a message."""
    from dlscope.importers.xplane_pb import fields

    fs = fields(buf)
    if not fs:
        raise ValueError("an empty message")
    nested = [k for k, (_, wt, _) in enumerate(fs) if wt == 2]
    if nested and depth < 8 and rng.random() < 0.85:
        k = rng.choice(nested)
        num, wt, value = fs[k]
        try:
            fs[k] = (num, wt, _pb_edit(value, rng, depth + 1))
            return b"".join(_pb_field(*f) for f in fs)
        except ValueError:
            pass  # not a message (a text, packed numbers): edit it here
    k = rng.randrange(len(fs))
    num, wt, value = fs[k]
    op = rng.choice(["extreme", "extreme", "hostile", "drop", "duplicate", "wire_type"])
    if op == "extreme":
        fs[k] = (num, 0, rng.choice(EXTREME_VARINTS))
    elif op == "hostile":
        fs[k] = (num, 2, rng.choice(HOSTILE_STRINGS).encode("utf-8", "surrogatepass"))
    elif op == "drop":
        del fs[k]
    elif op == "duplicate":
        fs.insert(k, fs[k])
    else:
        fs[k] = (num, 2, _pb_varint(value)) if wt == 0 else (num, 0, len(value))  # type: ignore[arg-type]
    return b"".join(_pb_field(*f) for f in fs)


def mutate_protobuf(data: bytes, rng: random.Random) -> bytes:
    """One to three field-level edits of a protobuf (an XSpace), each at a random depth."""
    for _ in range(rng.randint(1, 3)):
        try:
            data = _pb_edit(data, rng, 0)
        except ValueError:
            break
    return data


# ---- execution traces ----------------------------------------------------------------------------

ET_FIELDS = [
    "name",
    "id",
    "rf_id",
    "parent",
    "fw_parent",
    "seq_id",
    "tid",
    "inputs",
    "input_shapes",
    "input_types",
    "outputs",
    "output_shapes",
    "output_types",
    "op_schema",
    "ctrl_deps",
    "attrs",
]


def mutate_execution_trace(doc: object, rng: random.Random) -> object:
    """One to three edits of a parsed execution trace (a copy)."""
    doc = copy.deepcopy(doc)
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(
            ["drop_field", "retype", "extreme", "extreme", "hostile_name", "drop_nodes", "duplicate_nodes", "top_level"]
        )
        if op == "top_level" or not isinstance(nodes, list) or not nodes:
            if isinstance(doc, dict):
                doc[rng.choice(["schema", "pid", "nodes", "start_ts", "finish_ts"])] = _hostile_value(rng)
                nodes = doc.get("nodes")
            continue
        k = rng.randrange(len(nodes))
        node = nodes[k]
        if not isinstance(node, dict):
            nodes[k] = {}
            continue
        if op == "drop_field":
            node.pop(rng.choice(ET_FIELDS), None)
        elif op == "retype":
            node[rng.choice(ET_FIELDS)] = _hostile_value(rng)
        elif op == "extreme":
            node[rng.choice(["rf_id", "id", "parent", "tid", "seq_id"])] = rng.choice(EXTREME_NUMBERS)
        elif op == "hostile_name":
            node["name"] = rng.choice(HOSTILE_STRINGS)
        elif op == "drop_nodes":
            del nodes[k : k + rng.randint(1, max(1, len(nodes) // 3))]
        else:
            nodes[k:k] = copy.deepcopy(nodes[k : k + rng.randint(1, 10)])
    return doc


# ---- Nsight Compute CSV --------------------------------------------------------------------------

EXTREME_CELLS = [
    "1e400",
    "-1e400",
    "nan",
    "inf",
    "99999999999",
    "18446744073709551616",
    "-1",
    "0",
    "",
    "1,234.5",
    "0x10",
    "n/a",
    "1e-400",
]


def mutate_ncu_csv(data: bytes, rng: random.Random) -> bytes:
    """One to three edits of an ncu CSV's table (the lines before its header kept): a cell
    made extreme or hostile, a column dropped or renamed, rows dropped or duplicated."""
    import csv

    text = data.decode("utf-8", "replace")
    start = text.find('"ID"')
    if start < 0:
        return data
    rows = list(csv.reader(io.StringIO(text[start:])))
    for _ in range(rng.randint(1, 3)):
        if len(rows) < 2 or not rows[0]:
            break
        op = rng.choice(
            ["cell", "cell", "cell", "hostile", "drop_column", "rename_column", "drop_rows", "duplicate_rows"]
        )
        r = rng.randrange(1, len(rows))
        c = rng.randrange(len(rows[0]))
        if op in ("cell", "hostile") and c < len(rows[r]):
            rows[r][c] = rng.choice(EXTREME_CELLS if op == "cell" else HOSTILE_STRINGS)
        elif op == "drop_column":
            rows = [row[:c] + row[c + 1 :] for row in rows]
        elif op == "rename_column":
            rows[0][c] = rng.choice(["", "ID", "Metric Value", rows[0][c] + " "])
        elif op == "drop_rows":
            del rows[r : r + rng.randint(1, max(1, len(rows) // 3))]
        else:
            rows[r:r] = [list(row) for row in rows[r : r + rng.randint(1, 20)]]
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return (text[:start] + out.getvalue()).encode("utf-8", "surrogatepass")


# ---- PyTorch memory timelines ---------------------------------------------------------------------


def mutate_memory_rows(doc: object, rng: random.Random) -> object:
    """One to three edits of a parsed memory timeline (a copy): a cell retyped, hostile or
    extreme, a row cut short or lengthened, rows dropped or duplicated, a category past the list."""
    rows = copy.deepcopy(doc)
    if not isinstance(rows, list) or not rows:
        return rows
    for _ in range(rng.randint(1, 3)):
        if not rows:
            break
        op = rng.choice(["retype", "extreme", "extreme", "short", "long", "drop", "duplicate", "category", "row"])
        k = rng.randrange(len(rows))
        row = rows[k]
        if op in ("retype", "extreme", "category", "short", "long") and not isinstance(row, list):
            op = "row"
        if op == "retype" and row:
            row[rng.randrange(len(row))] = _hostile_value(rng)
        elif op == "extreme" and row:
            row[rng.randrange(len(row))] = rng.choice(EXTREME_NUMBERS)
        elif op == "category" and len(row) == 4:
            row[3] = rng.choice([-1, 8, 9, 10**6, 2**63])
        elif op == "short" and row:
            del row[rng.randrange(len(row)) :]
        elif op == "long":
            row.append(rng.choice([0, 1, "x", None]))
        elif op == "drop":
            del rows[k : k + rng.randint(1, max(1, len(rows) // 3))]
        elif op == "duplicate":
            rows[k:k] = copy.deepcopy(rows[k : k + rng.randint(1, 50)])
        else:
            rows[k] = _hostile_value(rng)
    return rows


# ---- folders of traces -----------------------------------------------------------------------------


def mutate_trace_folder(files: dict[str, bytes], rng: random.Random) -> tuple[dict[str, bytes], str]:
    """One or two edits of a folder of traces: a file mutated as its format is (an execution trace
    or a Kineto trace; structure or bytes, gzipped or not), dropped, emptied, or copied under
    another name."""
    files = dict(files)
    done = []
    for _ in range(rng.randint(1, 2)):
        if not files:
            break
        name = rng.choice(sorted(files))
        op = rng.choice(["structure", "structure", "structure", "bytes", "drop", "empty", "copy"])
        if op in ("structure", "bytes"):
            data = stored_bytes(files[name])
            if op == "structure":
                try:
                    doc = _PARSED_BYTES.get(files[name]) or json.loads(data)
                except ValueError:
                    doc = {}
                mutate = mutate_execution_trace if isinstance(doc, dict) and "nodes" in doc else mutate_kineto
                data = json.dumps(mutate(doc, rng), allow_nan=True).encode("utf-8", "surrogatepass")
            else:
                data = mutate_bytes(data, rng)
            del files[name]
            stem = name.removesuffix(".gz")
            if rng.random() < 0.5:
                files[stem + ".gz"] = gzip.compress(data, compresslevel=1)
            else:
                files[stem] = data
        elif op == "drop":
            del files[name]
        elif op == "empty":
            files[name] = b""
        else:
            files[f"copy_of_{name}"] = files[name]
        done.append(op)  # (not the file: a rank folder's names would split the counts per file)
    return files, ",".join(done) or "none"


# ---- nsys SQLite -------------------------------------------------------------------------------

NSYS_TIMED = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
]


def mutate_nsys(data: bytes, rng: random.Random) -> bytes:
    """SQL-level edits of an nsys export: NULL, swapped or extreme times, hostile names, a table
    dropped. Values the columns' NOT NULL would refuse are written with the constraint lifted
    (``PRAGMA writable_schema`` is not needed: the table is copied without it)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.sqlite"
        p.write_bytes(data)
        con = sqlite3.connect(p)
        try:
            for _ in range(rng.randint(1, 3)):
                table = rng.choice(NSYS_TIMED)
                op = rng.choice(["null_start", "swap", "extreme", "hostile_names", "drop_table", "drop_rows"])
                if op in ("null_start", "swap", "extreme"):
                    _relax(con, table)
                    n = rng.randint(1, 5)
                    sets = {
                        "null_start": "start = NULL",
                        "swap": 'start = "end", "end" = start',
                        "extreme": f"start = {rng.choice([-1, 0, 2**63 - 1, -(2**63)])}",
                    }[op]
                    con.execute(f"UPDATE {table} SET {sets} WHERE rowid % {n + 1} = 0")
                elif op == "hostile_names":
                    s = rng.choice(HOSTILE_STRINGS)
                    con.execute("UPDATE StringIds SET value = ? WHERE id % ? = 0", (s, rng.randint(2, 6)))
                elif op == "drop_table":
                    con.execute(f"DROP TABLE IF EXISTS {rng.choice([*NSYS_TIMED, 'StringIds', 'TARGET_INFO_GPU'])}")
                else:
                    con.execute(f"DELETE FROM {table} WHERE rowid % 2 = 0")
            con.commit()
        except sqlite3.Error:
            pass
        finally:
            con.close()
        return p.read_bytes()


def _relax(con: sqlite3.Connection, table: str) -> None:
    """Recreate ``table`` without NOT NULL constraints (so that NULLs can be written)."""
    cols = con.execute(f"PRAGMA table_info({table})").fetchall()
    if not cols:
        return
    decl = ", ".join(f'"{c[1]}" {c[2]}' for c in cols)
    con.execute(f"CREATE TABLE relaxed_tmp ({decl})")
    con.execute(f"INSERT INTO relaxed_tmp SELECT * FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE relaxed_tmp RENAME TO {table}")


# ---- profile folders ---------------------------------------------------------------------------

# tables a profile must hold (store.schema.TABLES less OPTIONAL_TABLES)
REQUIRED_TABLES = ["strings", "phases", "steps", "ops", "api", "kernels", "memcpy", "memset", "sync", "counters"]
META_FIELDS = [
    "format",
    "format_version",
    "dlscope_version",
    "source",
    "inputs",
    "command",
    "host",
    "start_ns",
    "end_ns",
    "exit_code",
    "ranks",
    "world_size",
    "devices",
    "frameworks",
    "collectors",
    "dropped",
    "clock",
    "batch_size",
    "batch_size_source",
    "warmup_steps",
    "step_window",
    "key_node",
    "notes",
    "table_rows",
    "timings_s",
]


def profile_files(folder: Path) -> dict[str, bytes]:
    """The files of a profile folder or a folder of traces: name -> content as stored."""
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir()) if f.is_file()}


def mutate_meta(doc: object, rng: random.Random) -> object:
    """meta.json as valid JSON of the wrong shape: another top-level type, a field of the wrong
    type or missing, a huge or odd format_version, a malformed device or collector entry."""
    doc = copy.deepcopy(doc)
    op = rng.choice(["toplevel", "retype", "retype", "retype", "drop", "version", "device", "collector"])
    if op == "toplevel" or not isinstance(doc, dict):
        return rng.choice([[], [doc], "meta", 1, None, True, {}, {"format": "dlscope"}])
    if op == "retype":
        for _ in range(rng.randint(1, 3)):
            doc[rng.choice(META_FIELDS)] = _hostile_value(rng)
    elif op == "drop":
        doc.pop(rng.choice(META_FIELDS), None)
    elif op == "version":
        doc["format_version"] = rng.choice([10**30, 2**63, 2**64, 1e300, 2, 0, -1, -(2**63), 1.0, "1", None, True])
    elif op == "device":
        devs = doc.get("devices")
        if isinstance(devs, list) and devs and isinstance(devs[0], dict):
            dev = rng.choice(devs)
            dev[rng.choice([*dev.keys(), "index", "rank", "name", "memory_total"])] = _hostile_value(rng)
        else:
            doc["devices"] = [_hostile_value(rng)]
    else:
        cols = doc.get("collectors")
        if isinstance(cols, dict) and cols:
            name = rng.choice(sorted(cols))
            cols[name] = rng.choice(
                [
                    _hostile_value(rng),
                    {"status": _hostile_value(rng)},
                    {"status": "ok", "settings": _hostile_value(rng)},
                    {"nostatus": 1},
                ]
            )
        else:
            doc["collectors"] = _hostile_value(rng)
    return doc


def _wrong_parquet(data: bytes, rng: random.Random) -> bytes:
    """Valid Parquet with the wrong columns or types: a column dropped, renamed, retyped (to text,
    float, bool or a narrower integer) or all NULL, no rows, or another table's columns."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(io.BytesIO(data))
    op = rng.choice(["drop", "rename", "retype", "retype", "nulls", "empty", "foreign"])
    if op == "foreign" or t.num_columns == 0:
        t = pa.table({"x": pa.array([1, 2, 3]), "name": pa.array(["a", "b", None])})
    else:
        i = rng.randrange(t.num_columns)
        field = t.schema.field(i)
        if op == "drop":
            t = t.remove_column(i)
        elif op == "rename":
            t = t.rename_columns([("renamed_" + n if k == i else n) for k, n in enumerate(t.column_names)])
        elif op == "retype":
            to = rng.choice(
                [
                    pa.string(),
                    pa.float64(),
                    pa.bool_(),
                    pa.int8(),
                    pa.int16(),
                    pa.uint64(),
                    pa.list_(pa.int64()),
                    pa.timestamp("ns"),
                ]
            )
            col = t.column(i)
            try:
                new = pc.cast(col, to, safe=False)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                new = pa.nulls(len(col), to)
            t = t.set_column(i, pa.field(field.name, to), new)
        elif op == "nulls":
            t = t.set_column(i, pa.field(field.name, field.type, nullable=True), pa.nulls(t.num_rows, field.type))
        else:
            t = t.slice(0, 0)
    out = io.BytesIO()
    pq.write_table(t, out)
    return out.getvalue()


def mutate_profile(files: dict[str, bytes], rng: random.Random) -> tuple[dict[str, bytes], str]:
    """One or two file-level edits of a profile folder: (the files, what was done)."""
    files = dict(files)
    done = []
    for _ in range(rng.randint(1, 2)):
        parquet = sorted(n for n in files if n.endswith(".parquet"))
        op = rng.choice(
            [
                "parquet_bytes",
                "parquet_bytes",
                "parquet_truncate",
                "meta_bytes",
                "meta_shape",
                "meta_shape",
                "delete_table",
                "empty_file",
                "wrong_parquet",
                "wrong_parquet",
            ]
        )
        if op in ("parquet_bytes", "parquet_truncate", "delete_table", "wrong_parquet") and not parquet:
            op = "meta_shape"
        if op == "parquet_bytes":
            name = rng.choice(parquet)
            files[name] = mutate_bytes(files[name], rng)
        elif op == "parquet_truncate":
            name = rng.choice(parquet)
            files[name] = files[name][: rng.randrange(len(files[name]) or 1)]
        elif op == "meta_bytes" and "meta.json" in files:
            name = "meta.json"
            files[name] = mutate_bytes(files[name], rng)
        elif op == "meta_shape" and "meta.json" in files:
            name = "meta.json"
            try:
                doc = json.loads(files[name])
            except ValueError:
                doc = {}
            files[name] = json.dumps(mutate_meta(doc, rng)).encode()
        elif op == "delete_table":
            name = rng.choice([n for n in parquet if n.split(".")[0] in REQUIRED_TABLES] or parquet)
            del files[name]
        elif op == "empty_file":
            name = rng.choice([*parquet, "meta.json"])
            files[name] = b""
        elif op == "wrong_parquet":
            name = rng.choice(parquet)
            try:
                files[name] = _wrong_parquet(files[name], rng)
            except Exception:  # an earlier edit damaged it: leave it so
                pass
        else:
            continue
        done.append(f"{op}:{name}")
    return files, ",".join(done) or "none"


# ---- one mutated input --------------------------------------------------------------------------


@dataclass
class Mutant:
    kind: str
    seed: str  # the seed file's name
    how: str  # "bytes", "structure" or "structure+bytes", and "+gz" when gzipped
    data: bytes
    suffix: str
    files: dict[str, bytes] | None = None  # a profile folder (kind "profile"): file name -> content

    def write(self, folder: Path) -> Path:
        """Write the input into ``folder``: a file ``input<suffix>``, or for a profile the folder
        ``input.dlscope`` beside the unmutated seed ``seed.dlscope`` (for diff and check)."""
        if self.files is None:
            path = folder / f"input{self.suffix}"
            path.write_bytes(self.data)
            return path
        if self.kind != "profile":  # a folder of traces, imported as one input
            path = folder / "input"
            path.mkdir()
            for name, content in self.files.items():
                (path / name).write_bytes(content)
            return path
        path = folder / "input.dlscope"
        path.mkdir()
        for name, content in self.files.items():
            (path / name).write_bytes(content)
        shutil.copytree(next(p for k, p in SEEDS if k == "profile" and p.name == self.seed), folder / "seed.dlscope")
        return path


_PARSED: dict[Path, object] = {}
_RAW: dict[Path, bytes] = {}
_PARSED_BYTES: dict[bytes, object] = {}  # a trace folder's files, parsed once (by stored content)


def _raw(path: Path) -> bytes:
    if path not in _RAW:
        _RAW[path] = seed_bytes(path)
    return _RAW[path]


def trace_folder_files(folder: Path) -> dict[str, bytes]:
    """A trace folder's files, each parsed once for the structure mutations."""
    files = profile_files(folder)
    for raw in files.values():
        if raw not in _PARSED_BYTES:
            _PARSED_BYTES[raw] = json.loads(stored_bytes(raw))
    return files


def mutant(rng: random.Random, kind: str | None = None) -> Mutant:
    """A mutated input of ``kind`` (any kind if None) from a seed chosen by ``rng``."""
    seeds = [s for s in SEEDS if kind is None or s[0] == kind]
    k, path = rng.choice(seeds)
    if k == "profile":
        files, how = mutate_profile(profile_files(path), rng)
        return Mutant(k, path.name, how, b"", ".dlscope", files)
    if k == "trace_folder":
        files, how = mutate_trace_folder(trace_folder_files(path), rng)
        return Mutant(k, path.name, how, b"", "", files)
    data = _raw(path)
    how = "bytes"
    if k in ("kineto", "memory_timeline") and rng.random() < (0.75 if k == "kineto" else 0.6):
        if path not in _PARSED:
            _PARSED[path] = json.loads(data)
        doc = (mutate_kineto if k == "kineto" else mutate_memory_rows)(_PARSED[path], rng)
        data = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
        how = "structure"
        if rng.random() < 0.2:
            data = mutate_bytes(data, rng)
            how += "+bytes"
    elif k == "nsys" and rng.random() < 0.6:
        data = mutate_nsys(data, rng)
        how = "structure"
    elif k == "xplane" and rng.random() < 0.6:
        data = mutate_protobuf(data, rng)
        how = "structure"
    elif k == "ncu" and rng.random() < 0.6:
        data = mutate_ncu_csv(data, rng)
        how = "structure"
    elif k == "execution_trace" and rng.random() < 0.6:
        if path not in _PARSED:
            _PARSED[path] = json.loads(data)
        data = json.dumps(mutate_execution_trace(_PARSED[path], rng), allow_nan=True).encode("utf-8", "surrogatepass")
        how = "structure"
    else:
        data = mutate_bytes(data, rng, [_raw(p) for _, p in SEEDS[:3]])
    suffix = suffix_of(k)
    if k != "xplane" and rng.random() < 0.3:
        data = gzip.compress(data, compresslevel=1)
        suffix += ".gz"
        how += "+gz"
    return Mutant(k, path.name, how, data, suffix)


# ---- the property -------------------------------------------------------------------------------

Runner = Callable[[list[str]], tuple[int, str, str]]


def run_in_process(args: list[str]) -> tuple[int, str, str]:
    """``dlscope ARGS`` in this process: (exit code, stdout, stderr)."""
    from dlscope.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def _outcome_problem(what: str, code: int, err: str) -> str | None:
    if "Traceback" in err:
        return f"{what}: a traceback on stderr: {err.strip()[-300:]!r}"
    if code == 0:
        return None
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    if code == 2 and len(lines) == 1 and lines[0].startswith("dlscope: "):
        return None
    return f"{what}: exit {code}, stderr {err.strip()[-400:]!r}"


def commands(profile: Path, work: Path) -> list[list[str]]:
    """Every command the property runs over an imported profile: every report, advice with its
    what-ifs, the HTML report, export in every format, diff (advice left out: ``advise`` ran it) and
    check against itself, SQL."""
    p = str(profile)
    return [
        ["summary", p],
        ["stats", p, "--report", "all", "--format", "json"],
        ["advise", p, "--what-if"],
        ["report", p, "-o", str(work / "x.html"), "-f"],
        ["export", p, "-o", str(work / "x.json.gz"), "-f"],
        ["export", p, "--type", "csv", "-o", str(work / "x-csv"), "-f"],
        ["export", p, "--type", "parquet", "-o", str(work / "x-parquet"), "-f"],
        # diff's own comparison; its advice is the advise command's, run above (a profile folder
        # input's diff against its seed runs the advice matching too: profile_commands)
        ["diff", p, p, "--no-advice", "--format", "json"],
        ["check", p, "--baseline", p, "--metric", "step_p50,step_p95,throughput,mem_peak"],
        ["sql", p, "select count(*) from kernels"],
    ]


def profile_commands(profile: Path, work: Path, seed: Path) -> list[list[str]]:
    """Every command over a (damaged) profile: :func:`commands`, and the comparisons with the
    unmutated ``seed`` (diff both ways, check against the seed, merge)."""
    p, s = str(profile), str(seed)
    return [
        *commands(profile, work),
        ["diff", s, p, "--format", "json"],
        ["diff", p, s, "--no-advice"],
        ["check", p, "--baseline", s, "--max-regression", "999999%"],
        ["merge", p, s, "-o", str(work / "merged.dlscope"), "-f"],
    ]


def check_input(path: Path, work: Path, run: Runner = run_in_process) -> tuple[bool, list[str]]:
    """Import ``path`` and run every command over the profile: (imported, problems). A profile
    folder (``*.dlscope``, with the unmutated ``seed.dlscope`` beside it) is not imported: every
    command runs over it as it is, and "imported" means that ``summary`` opened it."""
    if path.is_dir() and path.suffix == ".dlscope":
        problems = []
        opened = False
        for args in profile_commands(path, work, path.parent / "seed.dlscope"):
            code, _, err = run(args)
            opened |= args[0] == "summary" and code == 0
            problem = _outcome_problem(" ".join(a if "/" not in a else Path(a).name for a in args[:3]), code, err)
            if problem:
                problems.append(problem)
        return opened, problems
    profile = work / "p.dlscope"
    code, _, err = run(["import", str(path), "-o", str(profile), "-f"])
    problems = [p for p in [_outcome_problem("import", code, err)] if p]
    if code != 0:
        return False, problems
    for args in commands(profile, work):
        code, _, err = run(args)
        problem = _outcome_problem(args[0], code, err)
        if problem:
            problems.append(problem)
            continue
        if code != 0:
            continue
        if args[0] == "report":
            html = (work / "x.html").read_bytes().lower()
            if b"<script" in html:
                problems.append("report: a raw <script> in the HTML report")
        elif args[0] == "export" and "--type" not in args:  # the timeline (csv and parquet: tables)
            try:
                json.loads(gzip.decompress((work / "x.json.gz").read_bytes()))
            except ValueError as e:
                problems.append(f"export: the timeline is not valid JSON ({e})")
    return True, problems
