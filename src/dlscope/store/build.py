"""Assembling a profile from named tables: the one path shared by finalize and every importer.

Collectors' decoders and importers produce tables whose name columns hold text (``name``,
``domain``, ``input_shapes``, ``input_types``, ``metric``). :class:`ProfileBuilder` interns all of
them into one ``strings`` table, computes what every source needs alike (nesting depth and
parent of ranges, ops' self time, the step of every event) and writes the profile.

Everything happens in one DuckDB connection, :attr:`ProfileBuilder.con`: Arrow tables handed to
:meth:`~ProfileBuilder.add` are scanned in place, and importers may build their tables directly
in that connection (:meth:`~ProfileBuilder.add_relation`), so large imports never copy events
into Python. Only distinct strings pass through Python, to be interned, and the few columns the
nesting of ranges needs (:mod:`.nesting`, in numpy).
"""

from __future__ import annotations

import itertools
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from ..errors import InputError
from . import db
from .meta import Meta
from .schema import (
    DUCK_TYPES,
    NAME_COLUMNS,
    TABLES,
    TABLES_BY_NAME,
    Table,
    malformed_time_sql,
)
from .writer import write_profile

if TYPE_CHECKING:
    import pyarrow as pa

_ids = itertools.count()

# DuckDB's memory while building: beyond it, it spills to disk. Measured on the 504k-event trace
# with 2 threads at 200 MB: peak RSS 344 MB instead of 438 MB, 4% slower (bench/import_speed.py).
# It grows with the threads because each thread parses its own part of a trace at once: on the
# 16-core H100 host (8 threads) 300 MB ran out of memory, 400 to 600 MB took the same time with a
# peak of 380 to 396 MB, 800 MB 460 to 473 MB (bench/results/gpu_speed/stages_memory_h100.txt).
# Override with the environment variable DLSCOPE_BUILD_MEMORY (for the whole connection).
BUILD_MEMORY_BASE_MB = 120
BUILD_MEMORY_PER_THREAD_MB = 40


def build_memory_limit(threads: int) -> str:
    """200 MB at 2 threads, 440 MB at 8."""
    return (
        os.environ.get("DLSCOPE_BUILD_MEMORY")
        or f"{BUILD_MEMORY_BASE_MB + BUILD_MEMORY_PER_THREAD_MB * max(threads, 2)}MB"
    )


class Interner:
    """Global string table: text -> int32 id, in first-seen order."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._ids: dict[str, int] = {}

    def intern(self, text: str) -> int:
        i = self._ids.get(text)
        if i is None:
            i = self._ids[text] = len(self.values)
            self.values.append(text)
        return i

    def intern_array(self, arr: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Map a string array to int32 ids (nulls stay null) with one Python step per *distinct*
        value, not per row."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks() if arr.num_chunks else pa.array([], pa.string())
        if pa.types.is_dictionary(arr.type):
            arr = arr.cast(pa.string())
        if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
            arr = arr.cast(pa.string())
        enc = pc.dictionary_encode(arr)
        uniques = enc.dictionary.to_pylist()
        mapping = np.fromiter((self.intern(u) for u in uniques), dtype=np.int32, count=len(uniques))
        idx = enc.indices
        if len(mapping) == 0:
            return pa.nulls(len(arr), pa.int32())
        ids = pa.array(mapping).take(idx)
        return ids.cast(pa.int32())

    def table(self) -> pa.Table:
        import pyarrow as pa

        return pa.table(
            {"id": pa.array(range(len(self.values)), pa.int32()), "value": pa.array(self.values, pa.string())}
        )

    def create(self, con: duckdb.DuckDBPyConnection, name: str, values: list[str] | None = None) -> None:
        """Create the DuckDB table ``name`` (value, id) for ``values`` (default: every string),
        interning them; lists go to DuckDB as parameters, no Arrow needed."""
        values = self.values if values is None else values
        ids = [self.intern(v) for v in values]
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT unnest($1::VARCHAR[]) AS value, "
            "unnest($2::INTEGER[]) AS id",
            [values, ids],
        )


class ProfileBuilder:
    """Collect named tables (Arrow tables or relations in :attr:`con`), then build and write the
    stored tables."""

    def __init__(self) -> None:
        threads = db.default_threads()
        self.con = db.connect(threads, memory_limit=build_memory_limit(threads))
        self.parts: dict[str, list[str]] = defaultdict(list)
        self.interner = Interner()
        self._backing: list[str] = []
        self.dropped: dict[str, int] = {}  # table -> rows the schema does not allow (see _drop_malformed)

    def drop_after_prepare(self, relations: list[str]) -> None:
        """Tables that added views read from: dropped once the views have been copied."""
        self._backing += relations

    def add(self, table: str, data: pa.Table | None) -> None:
        """Add an Arrow table (scanned in place; keep it alive until write)."""
        if data is not None and data.num_rows:
            self._check(table)
            name = f"part{next(_ids)}"
            self.con.register(name, data)
            self.parts[table].append(name)

    def add_relation(self, table: str, relation: str) -> None:
        """Add a table or view that already lives in :attr:`con` (it may be empty)."""
        self._check(table)
        self.parts[table].append(relation)

    def add_all(self, tables: dict[str, pa.Table]) -> None:
        for name, t in tables.items():
            self.add(name, t)

    @staticmethod
    def _check(table: str) -> None:
        if table not in TABLES_BY_NAME or table == "strings":
            raise ValueError(f"unknown table {table}")

    def _columns(self, relation: str) -> set[str]:
        return {r[0] for r in self.con.execute(f"DESCRIBE {relation}").fetchall()}

    def _prepare(self) -> dict[str, int]:
        """Intern every text name column and create ``in_<table>``: the parts conformed to the
        schema (ids instead of text, missing nullable columns as NULL), with a row id.
        Returns table -> row count."""
        counts: dict[str, int] = {}
        for spec in TABLES:
            if spec.name == "strings":
                continue
            text_cols = NAME_COLUMNS.get(spec.name, {})
            selects = []
            for rel in self.parts.get(spec.name, []):
                have = self._columns(rel)
                joins, exprs = [], []
                for col in spec.columns:
                    text = next((t for t, i in text_cols.items() if i == col.name and t in have), None)
                    if text is not None:
                        m = self._intern_column(rel, text)
                        joins.append(f'LEFT JOIN {m} ON {m}.value = p."{text}"')
                        exprs.append(f"{m}.id")
                    elif col.name in have:
                        exprs.append(f'p."{col.name}"')
                    elif col.nullable:
                        exprs.append("NULL")
                    else:
                        raise InputError(f"table {spec.name}: required column {col.name} is missing")
                cols = ", ".join(
                    f'CAST({e} AS {_duck_type(c.dtype)}) AS "{c.name}"' for e, c in zip(exprs, spec.columns)
                )
                selects.append(f"SELECT {cols} FROM {rel} p {' '.join(joins)}")
            if not selects:
                cols = ", ".join(f'CAST(NULL AS {_duck_type(c.dtype)}) AS "{c.name}"' for c in spec.columns)
                selects = [f"SELECT {cols} WHERE FALSE"]
            # the row id is the table's rowid (its insertion order), read through a view:
            # row_number() OVER () is a window on one thread (40 ms for 285k ops).
            # One part (one trace file, one rank) at a time, in order: the same rows in the same
            # order as one UNION ALL of the parts, which ran out of the build's memory on 8 ranks of
            # 1M events each (the joins of every part at once, in insertion order; bench/scale_job.py)
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE in_rows_{spec.name} AS {selects[0]}")
            for select in selects[1:]:
                self.con.execute(f"INSERT INTO in_rows_{spec.name} {select}")
            self._drop_malformed(spec)
            self.con.execute(
                f"CREATE OR REPLACE TEMP VIEW in_{spec.name} AS SELECT rowid + 1 AS rid, * FROM in_rows_{spec.name}"
            )
            counts[spec.name] = self.con.execute(f"SELECT count(*) FROM in_{spec.name}").fetchall()[0][0]
            for rel in self.parts.pop(spec.name, []):  # the copy above replaces them: free them now
                self._drop(rel)
        for rel in self._backing:
            self._drop(rel)
        self._backing = []
        return counts

    def _drop_malformed(self, spec: Table) -> None:
        """Delete the rows of ``in_rows_<table>`` that the schema does not allow (NULL in a
        required column, a time out of range, an end before the start, a duration over 2**52 ns)
        and count them in :attr:`dropped`: an importer
        that let one through must not leave every analysis to trip on it."""
        bad = [f'"{c.name}" IS NULL' for c in spec.columns if not c.nullable]
        # a time before the epoch or past 2**62 ns (year 2116), an end before the start, a row
        # lasting over 2**52 ns: garbage that would overflow int64 in a difference or a sum of
        # times (schema.TIME_RULE; the reader applies the same rule)
        bad += malformed_time_sql([c.name for c in spec.columns])
        if not bad:
            return
        cond = " OR ".join(bad)
        table = f"in_rows_{spec.name}"
        n = self.con.execute(f"SELECT count(*) FROM {table} WHERE {cond}").fetchall()[0][0]
        if n:
            # a copy, not a DELETE: the row ids (rowid) stay dense
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM {table} WHERE NOT ({cond})")
            self.dropped[spec.name] = self.dropped.get(spec.name, 0) + int(n)

    def _note_dropped(self, meta: Meta) -> None:
        for table, n in sorted(self.dropped.items()):
            meta.note(
                f"{n} malformed row(s) of {table} not stored (a required value missing, a time out "
                "of range, an end before the start, or a duration over 2**52 ns)"
            )

    def _intern_column(self, relation: str, column: str) -> str:
        """A (value, id) table for the distinct values of one text column (sorted: the same input
        gets the same ids however DuckDB's threads divided the work)."""
        values = [
            r[0]
            for r in self.con.execute(
                f'SELECT DISTINCT "{column}" FROM {relation} WHERE "{column}" IS NOT NULL ORDER BY 1'
            ).fetchall()
        ]
        name = f"strmap{next(_ids)}"
        self.interner.create(self.con, name, values)
        return name

    def _drop(self, relation: str) -> None:
        db.drop(self.con, relation)

    def build(self) -> dict[str, pa.Table]:
        """The stored tables, in memory (strings included). For tests and small profiles."""
        views = link(self.con, self._prepare())
        out = {name: db.query_arrow(self.con, f"SELECT * FROM {view}") for name, view in views.items()}
        out["strings"] = self.interner.table()
        return out

    def write(self, profile_dir: Path, meta: Meta, durable: bool = True) -> Path:
        """Build and write the profile: each table goes from its SQL view straight to Parquet.
        ``durable``: synced to disk (a recording is; an import can be made again)."""
        t0 = time.perf_counter()
        views = link(self.con, self._prepare())
        self.interner.create(self.con, "strings_in")
        views["strings"] = "strings_in"
        self._note_dropped(meta)
        meta.timed("intern", time.perf_counter() - t0)
        write_profile(profile_dir, self.con, views, meta, durable)
        return profile_dir

    def close(self) -> None:
        self.con.close()


# ---- linking: nesting, self time and steps, in SQL ---------------------------------------------


def step_of_sql(source: str, time_col: str = "start_ns", steps: str = "steps_in") -> str:
    """SQL giving (rid, step) for each row of ``source``: the step whose [start, end) holds the
    row's time, on the same rank."""
    return f"""
    SELECT t.rid, CASE WHEN t.{time_col} < s.end_ns THEN s.step END AS step
    FROM {source} t ASOF LEFT JOIN {steps} s ON t.rank = s.rank AND t.{time_col} >= s.start_ns
    """


def key_node_steps_sql(instances: str, traced: str = "TRUE", source: str = "key_node") -> str:
    """SQL tiling a run into iterations from the instances of a key node (a relation with rank,
    start_ns, end_ns, pid, tid), with DLProf's semantics: iteration *i* ends where the *i*-th
    instance ends and starts where the previous one ended; the first starts at its own start.
    ``traced`` is an expression over the instance row; ``source`` the steps' source (a word:
    'key_node', or 'jit_executable' for the runs of a JAX program's training step)."""
    assert source.isidentifier(), source  # it is written into the SQL as a literal
    return f"""
    SELECT rank, (row_number() OVER w - 1)::INTEGER AS step,
           coalesce(lag(end_ns) OVER w, start_ns) AS start_ns, end_ns, pid, tid,
           '{source}' AS source, FALSE AS warmup, {traced} AS traced
    FROM {instances} WINDOW w AS (PARTITION BY rank ORDER BY end_ns, start_ns)
    """


def link(con: duckdb.DuckDBPyConnection, counts: dict[str, int]) -> dict[str, str]:
    """Create, in ``con``, one view per table (``final_<name>``) over its ``in_<name>`` table
    with the derived columns filled: depth of phases; depth, parent and self time of ops (when
    the source did not give them); and ``step`` of every event. GPU activity takes the step of
    the API call that launched it (a kernel launched in step 3 belongs to step 3 even if it runs
    later). Returns table -> view name."""
    from .nesting import create_nesting_table  # numpy: loaded when a profile is built

    views: dict[str, str] = {}
    has = {name: n > 0 for name, n in counts.items()}
    has_steps = has.get("steps", False)

    def final(name: str, select: str) -> None:
        spec = TABLES_BY_NAME[name]
        cols = ", ".join(f'CAST(x."{c.name}" AS {_duck_type(c.dtype)}) AS "{c.name}"' for c in spec.columns)
        con.execute(f"CREATE OR REPLACE VIEW final_{name} AS SELECT {cols} FROM ({select}) x")
        views[name] = f"final_{name}"

    def step_join(name: str, time_col: str) -> tuple[str, str]:
        if not has_steps:
            return "", "NULL"
        return f"LEFT JOIN ({step_of_sql(f'in_{name}', time_col, 'in_steps')}) st ON st.rid = t.rid", "st.step"

    # phases: depth among nested ranges of one thread (marks excluded, and so are NVTX start/end
    # ranges: they may overlap anything and end on another thread, so they have no depth)
    j, st = step_join("phases", "start_ns")
    nested = "(SELECT * FROM in_phases WHERE kind = 'range' AND coalesce(style, '') <> 'startend')"
    create_nesting_table(con, nested, ("rank", "pid", "tid"), "phase_nesting")
    final(
        "phases",
        f"""SELECT t.* REPLACE (n.depth AS depth, {st} AS step) FROM in_phases t
        LEFT JOIN phase_nesting n ON n.rid = t.rid {j}""",
    )
    # ops: depth, parent and self time unless the source gave them
    j, st = step_join("ops", "start_ns")
    if has.get("ops") and not con.execute("SELECT count(depth) FROM in_ops").fetchall()[0][0]:
        _create_op_links(con, "op_links")
        final(
            "ops",
            f"""SELECT t.* REPLACE (n.depth AS depth, n.parent_id AS parent_id, n.self_ns AS self_ns, {st} AS step)
            FROM in_ops t LEFT JOIN op_links n ON n.rid = t.rid {j}""",
        )
    else:
        final("ops", f"SELECT t.* REPLACE ({st} AS step) FROM in_ops t {j}")
    for name, time_col in (
        ("api", "start_ns"),
        ("sync", "start_ns"),
        ("counters", "ts_ns"),
        ("phase_gpu", "start_ns"),
        ("module_calls", "start_ns"),
    ):
        j, st = step_join(name, time_col)
        final(name, f"SELECT t.* REPLACE ({st} AS step) FROM in_{name} t {j}")
    # GPU work takes its launch's step: the steps of launches, computed once
    if has_steps and has.get("api"):
        con.execute("""CREATE OR REPLACE TEMP TABLE launch_step AS
            SELECT rank, correlation_id, any_value(step) AS step FROM final_api
            WHERE correlation_id IS NOT NULL GROUP BY ALL""")
    for name in ("kernels", "memcpy", "memset", "comms"):
        j, st = step_join(name, "start_ns")
        launch, step = "", st
        if has_steps and has.get("api"):
            launch = "LEFT JOIN launch_step a ON a.rank = t.rank AND a.correlation_id = t.correlation_id"
            step = f"coalesce(a.step, {st})"
        final(name, f"SELECT t.* REPLACE ({step} AS step) FROM in_{name} t {launch} {j}")
    final("steps", "SELECT * FROM in_steps")
    final("kernel_metrics", "SELECT * FROM in_kernel_metrics")
    final("tries", "SELECT * FROM in_tries")
    return views


def _create_op_links(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Create ``name`` (rid, depth, parent_id, self_ns) for ``in_ops``: self time is the op's
    time less its children's."""
    import numpy as np

    from .nesting import nesting_arrays, register_table

    d = nesting_arrays(con, "in_ops", ("rank", "pid", "tid"), extra=("op_id",))
    parent = d["parent"]
    has = parent >= 0
    dur = np.asarray(d["end_ns"], np.int64) - np.asarray(d["start_ns"], np.int64)
    # float sums are exact below 2**53 ns (104 days) per parent
    child = np.bincount(parent[has], weights=dur[has], minlength=len(dur)).astype(np.int64)
    op_id = np.asarray(np.ma.getdata(d["op_id"]), np.int64)
    parent_id = np.ma.masked_array(op_id[np.maximum(parent, 0)], mask=~has)
    register_table(
        con,
        name,
        {"rid": np.asarray(d["rid"], np.int64), "depth": d["depth"], "parent_id": parent_id, "self_ns": dur - child},
    )


def _duck_type(dtype: str) -> str:
    return DUCK_TYPES[dtype]
