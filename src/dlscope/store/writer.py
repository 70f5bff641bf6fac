"""Writing a finished profile: one Parquet file per table, then ``meta.json`` last.

``meta.json`` is written after every table, atomically, so its presence means the profile is
whole. Times are delta-encoded (they arrive nearly sorted), strings dictionary-encoded and
everything zstd-compressed: about 10 bytes per event on disk.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from .meta import Meta
from .schema import TABLES, TABLES_BY_NAME, conform, empty_table
from .spool import write_json_atomic

_TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns")


def write_table(profile_dir: Path, name: str, table: pa.Table, rank: int | None = None) -> int:
    """Write one table (conformed to its schema, sorted by its sort key); returns its row count."""
    spec = TABLES_BY_NAME[name]
    table = conform(name, table)
    if spec.sort_by and table.num_rows > 1:
        table = table.sort_by([(c, "ascending") for c in spec.sort_by])
    fname = f"{name}.parquet" if rank is None else f"{name}.rank{rank}.parquet"
    tmp = profile_dir / (fname + ".tmp")
    encodings = {c: "DELTA_BINARY_PACKED" for c in _TIME_COLUMNS if c in table.column_names}
    dictionary = [c for c in table.column_names if c not in encodings]
    pq.write_table(
        table, tmp, compression="zstd", compression_level=3,
        use_dictionary=dictionary, column_encoding=encodings or None,
        write_statistics=True,
    )
    os.replace(tmp, profile_dir / fname)
    return table.num_rows


def write_profile(profile_dir: Path, tables: dict[str, pa.Table], meta: Meta,
                  before_meta: Callable[[], None] | None = None) -> Path:
    """Write every table (missing ones empty) and then meta.json into ``profile_dir``."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    for old in profile_dir.glob("*.parquet"):
        old.unlink()
    rows = {}
    for spec in TABLES:
        rows[spec.name] = write_table(profile_dir, spec.name, tables.get(spec.name, empty_table(spec.name)))
    meta.table_rows = rows
    meta.dlscope_version = __version__
    if before_meta is not None:
        before_meta()
    write_json_atomic(profile_dir / "meta.json", meta.to_dict())
    return profile_dir


def remove_spool(profile_dir: Path) -> None:
    shutil.rmtree(profile_dir / "spool", ignore_errors=True)
