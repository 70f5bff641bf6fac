"""What every report works on: an opened profile, its DuckDB views, and the step selection.

Reports are pure functions ``ProfileData -> result``. They query the views created by
:func:`dlscope.store.reader.attach` plus ``sel_steps``: the steps the user selected (warm-up
excluded unless asked, ``--iter-start``/``--iter-stop`` applied), which every per-step statistic
uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from ...store import db
from ...store.meta import Meta
from ...store.reader import StoredProfile, attach, corrupt_table, open_profile
from ...store.schema import TABLES
from .prefetch import FAILED, Prefetch


@dataclass(frozen=True)
class Selection:
    """Which iterations statistics cover (inclusive step numbers)."""

    iter_start: int | None = None
    iter_stop: int | None = None
    include_warmup: bool = False
    key_node: str | None = None

    def describe(self) -> str:
        parts = []
        if self.iter_start is not None or self.iter_stop is not None:
            a = "" if self.iter_start is None else str(self.iter_start)
            b = "" if self.iter_stop is None else str(self.iter_stop)
            parts.append(f"steps {a}:{b}")
        if self.include_warmup:
            parts.append("warm-up included")
        if self.key_node:
            parts.append(f"iterations marked by {self.key_node!r}")
        return ", ".join(parts)


MIN_UNTRACED_STEPS = 3
# a profile of at most this many rows in all is queried on one DuckDB thread: DuckDB splits a scan
# into tasks of one row group (122,880 rows), so queries over tables this small run on one thread
# anyway, and more threads only add their start-up and scheduling (10-20% of the CPU time of each
# command over a small profile, most of it spent on ~100 queries of a few milliseconds)
ONE_THREAD_ROWS = 122_880
# tables held in memory up to this many rows in all (see ProfileData._fits_in_memory): about
# 250 MB of DuckDB memory
MEMORY_ROWS = 2_000_000
# tables recorded only while detailed tracing runs; runtime calls are not among them because
# stopping the tracer makes one (a device synchronize) in the step where it stops
DETAIL_TABLES = ("ops", "kernels", "memcpy", "memset")


class ProfileData:
    """An opened profile ready for queries."""

    def __init__(
        self,
        stored: StoredProfile,
        selection: Selection | None = None,
        con: duckdb.DuckDBPyConnection | None = None,
        statistics: bool = True,
    ) -> None:
        """``statistics`` False leaves out the views of the steps statistics use (``sel_steps``,
        ``stat_steps``, ``detail_steps``), for work that shows every event (the timeline)."""
        self.stored = stored
        self.meta: Meta = stored.meta
        self.selection = selection or Selection()
        self._shared: dict[str, str] = {}
        self._computed: dict[str, Any] = {}
        self._pending: dict[str, Prefetch] = {}  # values computed ahead (see prefetch())
        self._counts: dict[str, int] = {}
        self.traced_excluded: list[int] = []
        # steps left out because not every rank completed them (a rank of the job died)
        self.incomplete_excluded: list[int] = []
        # the analysis commands; an export reads every row once, streaming (and turns a damaged
        # file into one line itself: cli/export.py)
        in_memory = statistics and self._fits_in_memory()
        if con is None:
            # the connection that opened the profile, taken (views attached twice would clash, and a new
            # one costs 10-30 ms): on one thread for a small profile, on the machine's cores for a large one
            con, stored.connection = stored.connection, None
            large = sum(stored.rows.values()) > ONE_THREAD_ROWS
            if con is None:
                con = db.connect(threads=None if large else 1)
            elif large:
                db.set_threads(con, db.default_threads())
        self.con = attach(stored, con, in_memory=in_memory)
        if statistics and not in_memory:
            self._verify_files()
        if self.selection.key_node:
            from .iterations import apply_key_node

            apply_key_node(self.con, self.selection.key_node, stored.names_listed)
        if statistics:
            self._select_steps()

    def _fits_in_memory(self) -> bool:
        """Whether the tables are read into DuckDB's memory once (by :func:`attach`): unless they
        hold more than :data:`MEMORY_ROWS` rows together (the files' own counts). Every query
        that names a view over Parquet files binds it again (opens the files, reads their
        footers and schemas): tens of milliseconds per query on a loaded machine, however small
        the query, and a report runs about a hundred queries. Reading the tables takes about as
        long as three such binds on the 504k-event profile. Beyond the limit the views stay on
        the files: there the queries' own work outweighs binding, and memory matters more."""
        tables = [s.name for s in TABLES if s.name != "strings" and self.stored.files.get(s.name)]
        return sum(int(self.stored.rows.get(t) or 0) for t in tables) <= MEMORY_ROWS

    def _verify_files(self) -> None:
        """Read every table file once, streaming, where the tables stay on the files: a file
        damaged past its footer (a compressed page, an encoding) is then refused here with one
        line (:func:`corrupt_table`), not halfway through an export or a report. It costs one
        more decode of every row (0.1-0.2 s for the 70k rows of
        tests/data/phase_gpu/gpt2_baseline.dlscope), beside an export's own pass over them."""
        for t in [s.name for s in TABLES if s.name != "strings" and self.stored.files.get(s.name)]:
            try:
                for _ in db.arrow_batches(self.con, f"SELECT * FROM raw_{t}"):
                    pass
            except (duckdb.Error, OSError, pa.ArrowException) as e:
                raise corrupt_table(self.stored, t, e) from None

    @classmethod
    def open(cls, path: str | Path, selection: Selection | None = None, statistics: bool = True) -> ProfileData:
        return cls(open_profile(path), selection, statistics=statistics)

    @property
    def path(self) -> Path:
        return self.stored.path

    def _select_steps(self) -> None:
        """``sel_steps``: the user's selection. ``stat_steps``: the steps timing statistics use:
        the selection without steps slowed by detailed tracing, when at least
        MIN_UNTRACED_STEPS remain (a profile with sampled detail), else the whole selection."""
        self._select_user_steps()
        n_clean, n_traced = self.con.execute(
            "SELECT count(*) FILTER (WHERE NOT coalesce(traced, FALSE)), count(*) FILTER (WHERE traced) FROM sel_steps"
        ).fetchall()[0]
        if n_traced and n_clean >= MIN_UNTRACED_STEPS:
            self.traced_excluded = [
                r[0] for r in self.con.execute("SELECT DISTINCT step FROM sel_steps WHERE traced ORDER BY 1").fetchall()
            ]
            self.con.execute(
                "CREATE OR REPLACE VIEW stat_steps AS SELECT * FROM sel_steps WHERE NOT coalesce(traced, FALSE)"
            )
        else:
            self.con.execute("CREATE OR REPLACE VIEW stat_steps AS SELECT * FROM sel_steps")
        self._select_detail_steps()

    def _select_detail_steps(self) -> None:
        """``detail_steps``: the selected steps that hold ops, runtime calls and GPU work: those
        not flagged (an imported trace is traced whole) and those flagged ``traced`` in which
        something was recorded. The step in which tracing stopped is flagged (the stop slowed
        it) but may hold nothing: counting it would add an empty step to every average."""
        tables = [t for t in DETAIL_TABLES if self.has(t)] or (["api"] if self.has("api") else [])
        # raw_<table> unless a key node re-derived the views' steps: the decoded views join the
        # names in (four joins for ops), which a step number does not need (a third of opening)
        src = "" if self.selection.key_node else "raw_"
        recorded = [f"SELECT DISTINCT rank, step FROM {src}{t} WHERE step IS NOT NULL" for t in tables]
        holds = f"OR (traced AND (rank, step) IN ({' UNION '.join(recorded)}))" if recorded else ""
        # a table of the database, not a temp one: a prefetch's cursor (see prefetch()) reads it too
        self.con.execute(
            f"CREATE OR REPLACE TABLE detail_steps AS SELECT * FROM sel_steps WHERE traced IS NULL {holds}"
        )

    def _select_user_steps(self) -> None:
        sel = self.selection
        cond = ["TRUE"]
        if not sel.include_warmup and sel.iter_start is None:
            cond.append("NOT warmup")
        if sel.iter_start is not None:
            cond.append(f"step >= {int(sel.iter_start)}")
        if sel.iter_stop is not None:
            cond.append(f"step <= {int(sel.iter_stop)}")
        common = self._common_steps_sql()
        if common:
            cond.append(common)
        self.con.execute(f"CREATE OR REPLACE VIEW sel_steps AS SELECT * FROM steps WHERE {' AND '.join(cond)}")

    def _common_steps_sql(self) -> str | None:
        """Where a rank of the job ended abnormally (``meta.run_end``), the condition that keeps
        only the steps every rank completed: the survivors' steps after the death (or the step
        a rank died in, which the others finished) would be measured against a job that no
        longer ran whole. Those left out go in ``incomplete_excluded``."""
        end = self.meta.run_end
        if end is None or not end.failed_ranks:
            return None
        n_ranks = len({r.rank for r in end.ranks})
        cond = f"step IN (SELECT step FROM steps GROUP BY step HAVING count(DISTINCT rank) >= {n_ranks})"
        self.incomplete_excluded = [
            r[0] for r in self.con.execute(f"SELECT DISTINCT step FROM steps WHERE NOT ({cond}) ORDER BY 1").fetchall()
        ]
        return cond

    # ---- query helpers -----------------------------------------------------------------------
    def table(self, sql: str, params: list[Any] | None = None) -> pa.Table:
        return db.query_arrow(self.con, sql, params)

    def shared_table(self, name: str, make: Callable[[], str]) -> str:
        """``name``, a temp table of the rows of the query ``make()``, made on first use: a
        result several reports and rules read (the host's states, each kernel name's class)
        is computed once per opened profile instead of once per query that needs it."""
        if name not in self._shared:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS {make()}")
            self._shared[name] = name
        return self._shared[name]

    def computed(self, name: str, make: Callable[[], Any]) -> Any:
        """``make()``'s result, computed on first use and kept for this opened profile: a Python
        value several rules read (the untraced steps' host time per class)."""
        if name not in self._computed:
            pending = self._pending.pop(name, None)
            value = pending.take() if pending is not None else FAILED
            self._computed[name] = make() if value is FAILED else value
        return self._computed[name]

    def prefetch(self, name: str, make: Callable[[ProfileData], Any]) -> None:
        """Start computing :meth:`computed`'s value of ``name`` now, as ``make(worker)`` in a
        background thread, where ``worker`` is this profile on a second DuckDB connection
        (:mod:`.prefetch`); ``computed(name, ...)`` then takes it, waiting if need be, or computes
        it itself where the worker failed. ``make`` must give what ``computed``'s own ``make``
        gives: the same function of the opened profile."""
        if name in self._computed or name in self._pending:
            return
        if self.selection.key_node:  # its steps are temp tables of this connection, which a second one cannot read
            return
        worker = self._worker()
        self._pending[name] = Prefetch(worker.con, lambda: make(worker))

    def cancel_prefetches(self) -> None:
        """Stop the values computed ahead that nothing took (a rule that could not run)."""
        pending, self._pending = self._pending, {}
        for p in pending.values():
            p.cancel()

    def _worker(self) -> ProfileData:
        """This profile on a new cursor of its database: the same views and selected steps, its
        own temp tables and results (none shared with this object: another thread uses them)."""
        worker = object.__new__(ProfileData)
        worker.__dict__.update(self.__dict__)
        worker.con = self.con.cursor()
        worker._shared, worker._computed, worker._pending = {}, dict(self._computed), {}
        worker._counts = dict(self._counts)
        return worker

    def shared_islands(self, name: str, source: Callable[[], str], keys: tuple[str, ...] = ("rank",)) -> str:
        """``name``, a temp table (keys..., start_ns, end_ns) of the disjoint islands covering
        the intervals of the query ``source()`` per key (as :func:`.intervals.union_sql` makes
        them), made on first use. The union is computed in numpy (:func:`.interval_arrays.union`):
        the same islands, a fraction of the time of SQL's window functions on 100k intervals.
        Keys are integer columns (rank, device)."""
        if name not in self._shared:
            from .interval_arrays import union

            cols = ", ".join((*keys, "start_ns", "end_ns"))
            isl = union(self.con.execute(f"SELECT {cols} FROM ({source()})").fetchnumpy(), keys)
            arrays = f"{name}_arrays"
            # DuckDB scans numpy arrays in place (pa.array() would import pandas: 0.3 s)
            self.con.register(
                arrays,
                {
                    **{k: np.ascontiguousarray(isl[k], np.int32) for k in keys},
                    "start_ns": np.ascontiguousarray(isl["start_ns"], np.int64),
                    "end_ns": np.ascontiguousarray(isl["end_ns"], np.int64),
                },
            )
            try:
                self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {arrays}")
            finally:
                self.con.unregister(arrays)
            self._shared[name] = name
        return self._shared[name]

    def rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.table(sql, params).to_pylist()
        return rows

    def scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    def count(self, table: str) -> int:
        if table not in self._counts:  # asked by most reports and rules: counted once
            # the files' own row counts (meta.json's table_rows may disagree with a damaged file)
            stored = self.stored.rows.get(table)
            self._counts[table] = int(
                stored if stored is not None else self.scalar(f"SELECT count(*) FROM raw_{table}")
            )
        return self._counts[table]

    def step_count(self) -> int:
        """Rows of ``steps`` (as the selection defines them: key-node iterations replace the
        recorded steps), counted once."""
        if "steps view" not in self._counts:
            self._counts["steps view"] = int(self.scalar("SELECT count(*) FROM steps") or 0)
        return self._counts["steps view"]

    def has(self, table: str) -> bool:
        return self.count(table) > 0

    def close(self) -> None:
        self.con.close()
