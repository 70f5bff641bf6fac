"""A value computed ahead, on a second DuckDB connection in a background thread.

DuckDB releases the GIL while a query runs, and a command mostly runs Python (the rules, the
models) between its queries on one core: a result that is needed later (the roofline the
``below_roofline`` rule reads: 130-180 ms of queries on the 504k-event profile) can be queried
on the other core meanwhile (0.12 s off the first ``advise`` on that profile, bench/RESULTS.md).
It pays only where a core is idle, and DuckDB's client takes the GIL back between a query's
tasks (to check for signals), so a worker's query runs at about half speed beside Python.
The worker gets its own cursor (``con.cursor()``: one database queried from two threads) and its
own temp tables; it sees what the opened profile's connection created in the database (the tables,
their views, the selected steps), not that connection's temp tables.

A prefetch never decides a result: the value is the same function's on the same database, and
whatever goes wrong in the worker (an error, a table it cannot see) leaves the caller to compute
the value itself, as without the prefetch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import duckdb

# what :meth:`Prefetch.take` returns where the worker gave no value
FAILED = object()


class Prefetch:
    """One value being computed by ``make(worker_data)`` in a daemon thread."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection, make: Callable[[], Any]) -> None:
        self._cursor = cursor
        self._make = make
        self._value: Any = FAILED
        self._thread = threading.Thread(target=self._run, name="dlscope-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._make()
        except Exception:  # the caller computes it instead (see the module's docstring)
            self._value = FAILED
        finally:
            self._cursor.close()

    def take(self) -> Any:
        """The value, waiting for the worker; :data:`FAILED` where it gave none."""
        self._thread.join()
        return self._value

    def cancel(self) -> None:
        """Stop the worker's query (its value is not wanted) and wait for the thread to end: no
        query may still run on the database when the command closes it."""
        if self._thread.is_alive():
            try:
                self._cursor.interrupt()
            except duckdb.Error:  # closed meanwhile: the thread is ending
                pass
        self._thread.join()
