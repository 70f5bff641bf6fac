"""Assembling a profile from named tables: the one path shared by finalize and every importer.

Collectors' decoders and importers produce tables whose name columns hold text (``name``,
``domain``, ``input_shapes``, ``input_types``, ``metric``). :class:`ProfileBuilder` interns all of
them into one ``strings`` table (vectorized: one hash pass per column), computes what every
source needs alike (nesting depth and parent of ranges, ops' self time, the step of every
event) with DuckDB, and writes the profile.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import db
from .meta import Meta
from .schema import NAME_COLUMNS, TABLES, TABLES_BY_NAME, conform, empty_table
from .writer import write_profile


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
        return pa.table({"id": pa.array(range(len(self.values)), pa.int32()),
                         "value": pa.array(self.values, pa.string())})


class ProfileBuilder:
    """Collect named tables, then build the stored tables."""

    def __init__(self) -> None:
        self.parts: dict[str, list[pa.Table]] = defaultdict(list)
        self.interner = Interner()

    def add(self, table: str, data: pa.Table | None) -> None:
        if data is not None and data.num_rows:
            if table not in TABLES_BY_NAME or table == "strings":
                raise ValueError(f"unknown table {table}")
            self.parts[table].append(data)

    def add_all(self, tables: dict[str, pa.Table]) -> None:
        for name, t in tables.items():
            self.add(name, t)

    def _intern(self, name: str, t: pa.Table) -> pa.Table:
        for text_col, id_col in NAME_COLUMNS.get(name, {}).items():
            if text_col in t.column_names:
                ids = self.interner.intern_array(t.column(text_col))
                t = t.drop_columns([text_col])
                if id_col in t.column_names:
                    t = t.drop_columns([id_col])
                t = t.append_column(id_col, ids)
        return t

    def _inputs(self) -> dict[str, pa.Table]:
        """Every table interned and conformed to its schema (without the derived columns)."""
        tables: dict[str, pa.Table] = {}
        for spec in TABLES:
            if spec.name == "strings":
                continue
            parts = [self._intern(spec.name, p) for p in self.parts.get(spec.name, [])]
            parts = [conform(spec.name, p) for p in parts]
            tables[spec.name] = pa.concat_tables(parts) if parts else empty_table(spec.name)
        return tables

    def build(self) -> dict[str, pa.Table]:
        """The stored tables, in memory (strings included)."""
        con = db.connect()
        views = link(self._inputs(), con)
        out = {name: db.query_arrow(con, f"SELECT * FROM {view}") for name, view in views.items()}
        out["strings"] = self.interner.table()
        con.close()
        return out

    def write(self, profile_dir: Path, meta: Meta) -> Path:
        """Build and write the profile: each table goes from its SQL view straight to Parquet."""
        t0 = time.perf_counter()
        inputs = self._inputs()
        con = db.connect()
        views = link(inputs, con)
        con.register("strings_in", self.interner.table())
        views["strings"] = "strings_in"
        meta.timed("intern", time.perf_counter() - t0)
        t1 = time.perf_counter()
        write_profile(profile_dir, con, views, meta)
        meta.timed("link_write", time.perf_counter() - t1)
        con.close()
        return profile_dir


# ---- linking: nesting, self time and steps, in SQL ---------------------------------------------

def nesting_sql(source: str, group_cols: str) -> str:
    """SQL giving (rid, depth, parent_rid) for the intervals of ``source`` (columns rid,
    start_ns, end_ns and ``group_cols``).

    Starts and ends become +1/-1 events; the running sum per group (thread) is the depth. At
    equal times, ends of intervals that already ran close first, then starts open (longer
    first, so an interval sharing its parent's start nests inside it), then zero-length
    intervals close. The parent is the latest-opened interval one level up, found by event
    sequence (never ambiguous, unlike start times)."""
    same_group = " AND ".join(f"c.{g.strip()} = p.{g.strip()}" for g in group_cols.split(","))
    return f"""
    WITH ev AS (
        SELECT rid, {group_cols}, start_ns AS t, 1 AS d, 1 AS cat, -end_ns AS tb FROM {source}
        UNION ALL
        SELECT rid, {group_cols}, end_ns AS t, -1 AS d,
               CASE WHEN end_ns = start_ns THEN 2 ELSE 0 END AS cat, -start_ns AS tb FROM {source}
    ), lv AS (
        SELECT rid, {group_cols}, d, sum(d) OVER w - 1 AS depth, row_number() OVER w AS seq
        FROM ev
        WINDOW w AS (PARTITION BY {group_cols} ORDER BY t, cat, tb, rid ROWS UNBOUNDED PRECEDING)
    ), starts AS (SELECT rid, {group_cols}, depth, seq FROM lv WHERE d = 1)
    SELECT c.rid, c.depth, p.rid AS parent_rid
    FROM starts c ASOF LEFT JOIN starts p ON {same_group} AND c.depth - 1 = p.depth AND c.seq > p.seq
    """


def step_of_sql(source: str, time_col: str = "start_ns", steps: str = "steps_in") -> str:
    """SQL giving (rid, step) for each row of ``source``: the step whose [start, end) holds the
    row's time, on the same rank."""
    return f"""
    SELECT t.rid, CASE WHEN t.{time_col} < s.end_ns THEN s.step END AS step
    FROM {source} t ASOF LEFT JOIN {steps} s ON t.rank = s.rank AND t.{time_col} >= s.start_ns
    """


def link(tables: dict[str, pa.Table], con: duckdb.DuckDBPyConnection | None = None) -> dict[str, str]:
    """Create, in ``con``, one view per table (``final_<name>``) with the derived columns filled:
    depth of phases; depth, parent and self time of ops (when the source did not give them);
    and ``step`` of every event. GPU activity takes the step of the API call that launched it (a
    kernel launched in step 3 belongs to step 3 even if it runs later). Inputs are registered
    zero-copy; nothing is materialized until the views are read or written. Returns
    table -> view name."""
    con = con or db.connect()
    views: dict[str, str] = {}
    for name, t in tables.items():
        con.register(f"in0_{name}", t)
        con.execute(f"CREATE OR REPLACE VIEW in_{name} AS SELECT row_number() OVER () AS rid, * FROM in0_{name}")
    has = {name: t.num_rows > 0 for name, t in tables.items()}
    has_steps = has.get("steps", False)

    def final(name: str, select: str) -> None:
        spec = TABLES_BY_NAME[name]
        cols = ", ".join(f'CAST(x."{c.name}" AS {_duck_type(c.type)}) AS "{c.name}"' for c in spec.columns)
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
    final("phases", f"""SELECT t.* REPLACE (n.depth AS depth, {st} AS step) FROM in_phases t
        LEFT JOIN ({nesting_sql(nested, "rank, pid, tid")}) n ON n.rid = t.rid {j}""")
    # ops: depth, parent and self time unless the source gave them
    j, st = step_join("ops", "start_ns")
    ops = tables.get("ops")
    if ops is not None and ops.num_rows and ops.column("depth").null_count == ops.num_rows:
        final("ops", f"""
            WITH n AS ({nesting_sql("in_ops", "rank, pid, tid")}),
                 child AS (SELECT n.parent_rid AS rid, sum(o.end_ns - o.start_ns)::BIGINT AS child_ns
                           FROM n JOIN in_ops o USING (rid) WHERE n.parent_rid IS NOT NULL GROUP BY 1)
            SELECT t.* REPLACE (n.depth AS depth, p.op_id AS parent_id,
                                (t.end_ns - t.start_ns) - coalesce(c.child_ns, 0) AS self_ns, {st} AS step)
            FROM in_ops t JOIN n ON n.rid = t.rid LEFT JOIN in_ops p ON p.rid = n.parent_rid
            LEFT JOIN child c ON c.rid = t.rid {j}""")
    else:
        final("ops", f"SELECT t.* REPLACE ({st} AS step) FROM in_ops t {j}")
    for name, time_col in (("api", "start_ns"), ("sync", "start_ns"), ("counters", "ts_ns")):
        j, st = step_join(name, time_col)
        final(name, f"SELECT t.* REPLACE ({st} AS step) FROM in_{name} t {j}")
    for name in ("kernels", "memcpy", "memset"):
        j, st = step_join(name, "start_ns")
        launch, step = "", st
        if has_steps and has.get("api"):
            launch = """LEFT JOIN (SELECT rank, correlation_id, any_value(step) AS step FROM final_api
                                   WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                        ON a.rank = t.rank AND a.correlation_id = t.correlation_id"""
            step = f"coalesce(a.step, {st})"
        final(name, f"SELECT t.* REPLACE ({step} AS step) FROM in_{name} t {launch} {j}")
    final("steps", "SELECT * FROM in_steps")
    return views


_DUCK_TYPES = {pa.int8(): "TINYINT", pa.int16(): "SMALLINT", pa.int32(): "INTEGER", pa.int64(): "BIGINT",
               pa.float64(): "DOUBLE", pa.string(): "VARCHAR", pa.bool_(): "BOOLEAN"}


def _duck_type(t: pa.DataType) -> str:
    return _DUCK_TYPES[t]
