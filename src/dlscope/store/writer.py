"""Writing a finished profile: one Parquet file per table, then ``meta.json`` last.

``meta.json`` is written after every table, atomically, so its presence means the profile is
whole. Tables are written by DuckDB straight from the builder's SQL views (nothing is
materialized in Python), sorted by each table's key, with Parquet v2 encodings (delta-encoded
times, dictionary strings) and zstd: about 10 bytes per event on disk.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import duckdb

from ..vocabulary.version import __version__
from . import db
from .meta import Meta
from .schema import TABLES, TABLES_BY_NAME
from .spool import write_json_atomic


def write_table(
    con: duckdb.DuckDBPyConnection, source: str, profile_dir: Path, name: str, rank: int | None = None
) -> int:
    """Write the relation ``source`` (a view or table in ``con``) as table ``name``; returns its
    row count. The file appears under its final name only once complete."""
    spec = TABLES_BY_NAME[name]
    fname = f"{name}.parquet" if rank is None else f"{name}.rank{rank}.parquet"
    tmp = profile_dir / (fname + ".tmp")
    cols = ", ".join(f'"{c.name}"' for c in spec.columns)
    order = f"ORDER BY {', '.join(spec.sort_by)}" if spec.sort_by else ""
    written = con.execute(
        f"COPY (SELECT {cols} FROM {source} {order}) TO {db.sql_str(str(tmp))} "
        "(FORMAT parquet, COMPRESSION zstd, PARQUET_VERSION V2)"
    ).fetchall()
    os.replace(tmp, profile_dir / fname)
    return int(written[0][0])


def write_profile(
    profile_dir: Path, con: duckdb.DuckDBPyConnection, sources: dict[str, str], meta: Meta, durable: bool = True
) -> Path:
    """Write every table (``sources``: table -> relation in ``con``), then meta.json (synced to
    disk when ``durable``)."""
    t = time.perf_counter()
    profile_dir.mkdir(parents=True, exist_ok=True)
    for old in profile_dir.glob("*.parquet"):
        old.unlink()
    rows = {spec.name: write_table(con, sources[spec.name], profile_dir, spec.name) for spec in TABLES}
    meta.timed("link_write", time.perf_counter() - t)
    meta.table_rows = rows
    meta.dlscope_version = __version__
    write_json_atomic(profile_dir / "meta.json", meta.to_dict(), durable)
    return profile_dir


def remove_spool(profile_dir: Path) -> None:
    shutil.rmtree(profile_dir / "spool", ignore_errors=True)
