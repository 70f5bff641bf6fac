"""Opening a profile and querying it with DuckDB.

:func:`open_profile` validates a finished profile (``meta.json`` plus every table's Parquet
footer) and never executes anything from it. :func:`attach` makes one DuckDB view per table;
the views of tables that carry names add the decoded text (``name``, ``input_shapes``, ``metric``
...), so ``select name, count(*) from kernels group by 1`` works as a user would expect. The raw
tables stay reachable as ``raw_<table>``, the decoded ones as stored as ``dec_<table>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from ..errors import InputError, ProfileFormatError
from . import db
from .meta import Meta, load_meta
from .schema import NAME_COLUMNS, OPTIONAL_COLUMNS, OPTIONAL_TABLES, TABLES

TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns")


@dataclass
class StoredProfile:
    """A finished profile on disk."""

    path: Path
    meta: Meta
    files: dict[str, list[Path]] = field(default_factory=dict)
    absent_columns: dict[str, set[str]] = field(default_factory=dict)  # optional columns the files predate

    @property
    def name(self) -> str:
        return self.path.name


def is_unfinished(path: Path) -> bool:
    """A directory with a spool but no meta.json: recording stopped before finalize."""
    return path.is_dir() and not (path / "meta.json").exists() and (path / "spool").is_dir()


def open_profile(path: str | Path) -> StoredProfile:
    """Validate and open a finished profile. Raises InputError/ProfileFormatError with one line."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such profile")
    if p.is_file():
        raise ProfileFormatError(
            f"{p}: is a file, not a dlscope profile directory (to read a trace, use 'dlscope import {p}')"
        )
    meta = load_meta(p / "meta.json")
    prof = StoredProfile(p, meta)
    for spec in TABLES:
        files = sorted(p.glob(f"{spec.name}.parquet")) + sorted(p.glob(f"{spec.name}.rank*.parquet"))
        if not files and spec.name not in OPTIONAL_TABLES:
            raise ProfileFormatError(f"{p}: incomplete profile (table {spec.name} is missing)")
        for f in files:
            try:
                md = pq.read_metadata(f)
            except Exception as e:  # pyarrow raises several types for damaged files
                raise ProfileFormatError(f"{f}: corrupt or truncated table file ({e.__class__.__name__})") from None
            missing = set(spec.column_names()) - set(md.schema.names)
            optional = missing & set(OPTIONAL_COLUMNS.get(spec.name, ()))
            if optional:
                prof.absent_columns.setdefault(spec.name, set()).update(optional)
                missing -= optional
            if missing:
                raise ProfileFormatError(f"{f}: table {spec.name} lacks columns {sorted(missing)}")
        prof.files[spec.name] = files
    return prof


def attach(profile: StoredProfile, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
    """Create the views of ``profile`` in ``con`` (a new connection if None) and return it."""
    con = con or db.connect()
    for spec in TABLES:
        absent = profile.absent_columns.get(spec.name, set())
        cols = ", ".join(f'CAST(NULL AS {db.duck_type(c.dtype)}) AS "{c.name}"' if c.name in absent else f'"{c.name}"'
                         for c in spec.columns)
        if profile.files[spec.name]:
            files = "[" + ", ".join(db.sql_str(str(f)) for f in profile.files[spec.name]) + "]"
            src = f"SELECT {cols} FROM read_parquet({files})"
            # rows without their times (a profile written before the builder refused them) would
            # trip every analysis: they are not read
            timed = [c.name for c in spec.columns if c.name in TIME_COLUMNS and not c.nullable
                     and c.name not in absent]
            if timed:
                src += " WHERE " + " AND ".join(f'"{c}" IS NOT NULL' for c in timed)
        else:  # a table this profile predates (see schema.OPTIONAL_TABLES)
            src = "SELECT " + ", ".join(f'CAST(NULL AS {db.duck_type(c.dtype)}) AS "{c.name}"' for c in spec.columns) \
                + " WHERE FALSE"
        if spec.name == "strings":
            con.execute(f"CREATE OR REPLACE TABLE strings AS {src}")
            continue
        con.execute(f"CREATE OR REPLACE VIEW raw_{spec.name} AS {src}")
        decoded = decoded_sql(spec.name)
        # dec_<table> stays as stored; <table> is what queries use (analysis may redefine it,
        # e.g. with steps re-derived from a key node)
        con.execute(f"CREATE OR REPLACE VIEW dec_{spec.name} AS {decoded}")
        con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS SELECT * FROM dec_{spec.name}")
    return con


def decoded_sql(table: str, key: str | None = None) -> str:
    """SQL of ``raw_<table>`` with each interned name column decoded from ``strings`` (joined on
    ``key`` too, for views over several profiles whose ids differ)."""
    names = NAME_COLUMNS.get(table)
    if not names:
        return f"SELECT * FROM raw_{table}"
    on_key = f" AND s{{i}}.{key} = t.{key}" if key else ""
    joins, extra = [], []
    for i, (col, idcol) in enumerate(names.items()):
        joins.append(f"LEFT JOIN strings s{i} ON s{i}.id = t.{idcol}" + on_key.format(i=i))
        extra.append(f"s{i}.value AS {col}")
    return f"SELECT t.*, {', '.join(extra)} FROM raw_{table} t {' '.join(joins)}"
