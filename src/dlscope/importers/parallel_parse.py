"""Parsing several JSON files into one table on every core, in their order.

DuckDB parses one JSON array on one thread. Several files read by one query are parsed in
parallel, but keeping their rows in order (``preserve_insertion_order``, which op ids and tie
breaks rely on) under the build's memory limit made that query slower than one file (1.39 s
against 1.17 s for the 504k-event trace on 2 cores). Instead each file gets its own query, on its
own cursor, from a pool of Python threads (DuckDB releases the GIL while it runs a query), and
the table is a view over the parts in file order: 0.70 s with one part per core. (Copying the
parts into one table took longer than the parse saved; a view over many small parts made every
later scan of it slower: so one part per core.)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import duckdb

from ..store import db


def create_in_order(
    con: duckdb.DuckDBPyConnection, name: str, files: list[Path], select: Callable[[list[Path]], str]
) -> list[str]:
    """Create ``name`` in ``con`` holding ``select(files)``'s rows in file order: a temporary
    table for one file; for several, a view over one table per file, each built by
    ``select([file])`` on its own thread. Returns the tables behind the view (to drop with it).
    A query's error is raised here once every thread has stopped."""
    if len(files) == 1:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {select(files)}")
        return []
    parts = [f"{name}_part{k}" for k in range(len(files))]
    workers = db.threads(con)
    try:
        _parse_parts(con, parts, files, select, workers)
    except duckdb.OutOfMemoryException:  # the parts at once do not fit the memory limit: in turn
        _parse_parts(con, parts, files, select, 1)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {name} AS " + " UNION ALL ".join(f"SELECT * FROM {part}" for part in parts)
    )
    return parts


def _parse_parts(
    con: duckdb.DuckDBPyConnection,
    parts: list[str],
    files: list[Path],
    select: Callable[[list[Path]], str],
    workers: int,
) -> None:
    """Create each table of ``parts`` from its file, ``workers`` at a time; on an error, none is
    left and the first error is raised."""
    pending = list(zip(parts, files))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        cur = con.cursor()  # tables, not temporary ones, are seen by every cursor
        try:
            while not errors:
                with lock:
                    if not pending:
                        return
                    part, path = pending.pop(0)
                cur.execute(f"CREATE OR REPLACE TABLE {part} AS {select([path])}")
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread
            errors.append(e)
        finally:
            cur.close()

    # each query runs on its own client thread: DuckDB's workers would only contend with them
    threads = db.threads(con)
    con.execute("SET threads = 1")
    try:
        pool = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(files)))]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        con.execute(f"SET threads = {threads}")
    if errors:
        for part in parts:
            con.execute(f"DROP TABLE IF EXISTS {part}")
        raise errors[0]
