"""DuckDB helpers shared by the store, importers and analysis (one place for API differences
between DuckDB releases)."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    import pyarrow as pa


def connect(threads: int | None = None, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection. Threads default to the machine's cores (at most 8: the
    tables are small enough that more threads only add start-up cost). With ``memory_limit``
    DuckDB spills what does not fit to a directory under the system's temporary directory
    (never the user's working directory, DuckDB's default). The connection :func:`warm` started
    is taken where it was started with the same thread count and no memory limit is asked."""
    n = threads or default_threads()
    if memory_limit is None:
        warmed = _take_warm(n)
        if warmed is not None:
            return warmed
    return _new_connection(n, memory_limit)


def _new_connection(n: int, memory_limit: str | None) -> duckdb.DuckDBPyConnection:
    # the thread count as the database starts: set afterwards, DuckDB first started a worker per
    # core and then stopped the extra ones (on every command's connection)
    con = duckdb.connect(":memory:", config={"threads": int(n)})
    con.execute("SET preserve_insertion_order = true")
    # DuckDB runs an ASOF join whose probe side is small (under 64 rows by default) as a nested
    # loop over the whole build side: with one row per step against every kernel or host island
    # that is the slowest part of the idle breakdowns. The sort-based ASOF join gives the same rows.
    try:
        con.execute("SET asof_loop_join_threshold = 0")
    except duckdb.Error:  # a DuckDB release without the setting (it has no loop plan either)
        pass
    if memory_limit:
        spill = Path(tempfile.gettempdir()) / f"dlscope-duckdb-{os.getpid()}"
        con.execute(f"SET temp_directory = {sql_str(str(spill))}")
        con.execute(f"SET memory_limit = {sql_str(memory_limit)}")
    return con


class _Warm:
    """A connection being made in a background thread (see :func:`warm`)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.made: duckdb.DuckDBPyConnection | None = None
        # not a daemon: the interpreter's exit waits for it (a daemon thread still in DuckDB's C++
        # as the interpreter finalizes would be stopped there)
        self.thread = threading.Thread(target=self._make, name="dlscope-duckdb-warm", daemon=False)
        self.thread.start()

    def _make(self) -> None:
        try:
            self.made = _new_connection(self.threads, None)
        except Exception:  # noqa: BLE001 - connect() makes its own then, and raises what it raises
            self.made = None


_warm: _Warm | None = None


def warm(threads: int | None = None) -> None:
    """Start making the process's next connection (``threads``, no memory limit) in a background
    thread. Starting a database costs 15-25 ms, all of it in DuckDB's C++ with Python's lock
    released: a command that opens a profile calls this first, and the start overlaps the import
    of the analysis and rendering modules (Python's work) that comes before the open."""
    global _warm
    if _warm is None:
        _warm = _Warm(threads or default_threads())


def _take_warm(n: int) -> duckdb.DuckDBPyConnection | None:
    global _warm
    w = _warm
    if w is None or w.threads != n:
        return None
    _warm = None
    w.thread.join()
    return w.made


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity: taskset, a container's or a batch
    job's CPU set; all the machine's cores otherwise), at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def set_threads(con: duckdb.DuckDBPyConnection, n: int) -> None:
    """Let the connection's queries use ``n`` threads (raising it starts the workers it lacks)."""
    con.execute(f"SET threads = {int(n)}")


def threads(con: duckdb.DuckDBPyConnection) -> int:
    """How many threads the connection's queries use."""
    return int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])


def drop(con: duckdb.DuckDBPyConnection, relation: str) -> None:
    """Drop a view, a table or a registered Python object of that name, whichever it is."""
    for kind in ("VIEW", "TABLE"):
        try:
            con.execute(f"DROP {kind} IF EXISTS {relation}")
        except duckdb.Error:  # an object of the other kind
            pass
    try:
        con.unregister(relation)
    except (duckdb.Error, KeyError):
        pass


def to_arrow(rel: Any) -> pa.Table:
    """Materialize a DuckDB relation as an Arrow table, whatever the DuckDB release calls it."""
    import pyarrow as pa

    for method in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fn = getattr(rel, method, None)
        if fn is not None:
            out = fn()
            return out if isinstance(out, pa.Table) else out.read_all()
    raise RuntimeError("this DuckDB release cannot return Arrow tables")


def query_arrow(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> pa.Table:
    return to_arrow(con.sql(sql, params=params) if params else con.sql(sql))


def sql_str(s: str) -> str:
    """Quote a string (a path) as a SQL literal."""
    return "'" + s.replace("'", "''") + "'"


def arrow_batches(con: duckdb.DuckDBPyConnection, sql: str, rows_per_batch: int = 65536) -> pa.RecordBatchReader:
    """Stream a query's result as Arrow record batches (for results too large to hold twice)."""
    rel = con.sql(sql)
    for method in ("to_arrow_reader", "fetch_record_batch", "fetch_arrow_reader"):
        fn = getattr(rel, method, None)
        if fn is not None:
            return fn(rows_per_batch)
    raise RuntimeError("this DuckDB release cannot stream Arrow batches")


def duck_type(t: pa.DataType | str) -> str:
    """The DuckDB type of a schema column's Arrow type (or its name, ``Column.dtype``)."""
    from .schema import DUCK_TYPES

    return DUCK_TYPES[str(t)]
