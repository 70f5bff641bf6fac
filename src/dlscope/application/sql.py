"""The `sql` use case: a DuckDB query over one profile's tables, or over many profiles at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from ..store.reader import StoredProfile


@dataclass
class Tables:
    """The tables of a profile, or of every profile a folder or glob names (each table then holds
    the rows of all of them, with a ``profile`` column); the unfinished recordings left out."""

    con: duckdb.DuckDBPyConnection
    unfinished: list[Path] = field(default_factory=list)
    profiles: list[StoredProfile] = field(default_factory=list)  # a folder's or glob's profiles


def is_many(target: str) -> bool:
    """Whether ``target`` names several profiles (a folder of them, or a glob)."""
    from ..store.fleet import is_fleet

    return is_fleet(target)


def table_names() -> list[str]:
    """The tables a profile's queries see (``strings`` left out: the views decode names)."""
    from ..store.schema import TABLES

    return [t.name for t in TABLES if t.name != "strings"]


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> pa.Table:
    """``sql``'s rows as Arrow; DuckDB's own error when it fails (the notebook shows it whole)."""
    from ..store import db

    return db.query_arrow(con, sql)


def open_tables(target: str) -> Tables:
    """The tables of ``target``: a profile, a folder of profiles or a glob."""
    from ..store.fleet import is_fleet, open_fleet
    from .open import open_for_analysis

    if is_fleet(target):
        con, profiles, unfinished = open_fleet(target)
        return Tables(con, list(unfinished), list(profiles))
    return Tables(open_for_analysis(target).con)


def query(tables: Tables, sql: str) -> pa.Table:
    """``sql``'s rows; a failing query is a UsageError (its first line)."""
    import duckdb

    from ..errors import UsageError

    try:
        return rows(tables.con, sql)
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise UsageError(f"query failed: {first}") from None
