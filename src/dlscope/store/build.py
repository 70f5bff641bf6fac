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

    def build(self, meta: Meta | None = None) -> dict[str, pa.Table]:
        """Intern, conform and link every table; returns the stored tables (strings included)."""
        t0 = time.perf_counter()
        tables: dict[str, pa.Table] = {}
        for spec in TABLES:
            if spec.name == "strings":
                continue
            parts = [self._intern(spec.name, p) for p in self.parts.get(spec.name, [])]
            parts = [conform(spec.name, p) for p in parts]
            tables[spec.name] = pa.concat_tables(parts) if parts else empty_table(spec.name)
        t1 = time.perf_counter()
        tables = link(tables)
        tables["strings"] = self.interner.table()
        if meta is not None:
            meta.timed("intern", t1 - t0)
            meta.timed("link", time.perf_counter() - t1)
        return tables

    def write(self, profile_dir: Path, meta: Meta) -> dict[str, pa.Table]:
        tables = self.build(meta)
        t = time.perf_counter()
        write_profile(profile_dir, tables, meta, before_meta=lambda: meta.timed("write", time.perf_counter() - t))
        return tables


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


def link(tables: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Fill the derived columns: depth of phases, depth/parent/self time of ops (when the source
    did not give them), and ``step`` of every event. GPU activity takes the step of the API call
    that launched it (a kernel launched in step 3 belongs to step 3 even if it runs later)."""
    con = db.connect()
    out = dict(tables)
    con.register("steps_in", out["steps"])

    def with_rid(name: str) -> None:
        t = out[name]
        con.register(f"{name}_in", t.append_column("rid", pa.array(np.arange(t.num_rows, dtype=np.int64))))

    def set_columns(name: str, sql: str, cols: list[str]) -> None:
        res = db.query_arrow(con, sql)
        t = out[name]
        order = np.argsort(res.column("rid").to_numpy())
        for c in cols:
            arr = res.column(c).take(pa.array(order)).cast(t.schema.field(c).type)
            t = t.set_column(t.schema.get_field_index(c), c, arr)
        out[name] = t

    # phases: depth among ranges of one thread (marks excluded)
    if out["phases"].num_rows:
        with_rid("phases")
        set_columns("phases", f"""
            SELECT p.rid, n.depth FROM phases_in p LEFT JOIN ({nesting_sql(
                "(SELECT * FROM phases_in WHERE kind = 'range')", "rank, pid, tid")}) n USING (rid)""",
                    ["depth"])
    # ops: depth, parent and self time, unless the source gave them
    ops = out["ops"]
    if ops.num_rows and ops.column("depth").null_count == ops.num_rows:
        with_rid("ops")
        set_columns("ops", f"""
            WITH n AS ({nesting_sql("ops_in", "rank, pid, tid")}),
                 child AS (SELECT n.parent_rid AS rid, sum(o.end_ns - o.start_ns)::BIGINT AS child_ns
                           FROM n JOIN ops_in o USING (rid) WHERE n.parent_rid IS NOT NULL GROUP BY 1)
            SELECT o.rid, n.depth, p.op_id AS parent_id,
                   (o.end_ns - o.start_ns) - coalesce(c.child_ns, 0) AS self_ns
            FROM ops_in o JOIN n USING (rid) LEFT JOIN ops_in p ON p.rid = n.parent_rid
            LEFT JOIN child c ON c.rid = o.rid""", ["depth", "parent_id", "self_ns"])
    if out["steps"].num_rows == 0:
        con.close()
        return out
    for name, time_col in (("phases", "start_ns"), ("ops", "start_ns"), ("api", "start_ns"),
                           ("sync", "start_ns"), ("counters", "ts_ns")):
        if out[name].num_rows:
            with_rid(name)
            set_columns(name, step_of_sql(f"{name}_in", time_col), ["step"])
    if out["api"].num_rows:
        with_rid("api")
    for name in ("kernels", "memcpy", "memset"):
        if not out[name].num_rows:
            continue
        with_rid(name)
        launch = ""
        if out["api"].num_rows:
            launch = """LEFT JOIN (SELECT rank, correlation_id, any_value(step) AS step FROM api_in
                                   WHERE correlation_id IS NOT NULL GROUP BY ALL) a
                        ON a.rank = g.rank AND a.correlation_id = g.correlation_id"""
        own = step_of_sql(f"{name}_in")
        set_columns(name, f"""
            SELECT g.rid, {"coalesce(a.step, o.step)" if launch else "o.step"} AS step
            FROM {name}_in g {launch} LEFT JOIN ({own}) o ON o.rid = g.rid""", ["step"])
    con.close()
    return out
