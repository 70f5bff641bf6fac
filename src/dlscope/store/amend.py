"""Adding one table to a finished profile (``dlscope ncu`` adds ``kernel_metrics``).

The table's text columns are interned against the profile's ``strings``: new values are
appended (ids already used never change), ``strings.parquet`` is rewritten, then the table's
file, then ``meta.json``; each appears under its final name only when complete. A crash between
them leaves unused strings at worst.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .meta import Meta
from .schema import NAME_COLUMNS, TABLES_BY_NAME, conform
from .spool import write_json_atomic


def _write(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def replace_table(profile_dir: Path, meta: Meta, name: str, data: pa.Table) -> int:
    """Make ``data`` (text name columns) the profile's table ``name``; returns its row count."""
    strings = pq.read_table(profile_dir / "strings.parquet")
    ids = dict(zip(strings.column("value").to_pylist(), strings.column("id").to_pylist()))
    added: list[str] = []
    for text, idcol in NAME_COLUMNS.get(name, {}).items():
        if text not in data.column_names:
            continue
        col = []
        for v in data.column(text).to_pylist():
            if v is not None and v not in ids:
                ids[v] = len(ids)
                added.append(v)
            col.append(None if v is None else ids[v])
        data = data.drop_columns([text]).append_column(idcol, pa.array(col, pa.int32()))
    if added:
        first = strings.num_rows
        more = pa.table(
            {"id": pa.array(range(first, first + len(added)), pa.int32()), "value": pa.array(added, pa.string())}
        )
        _write(pa.concat_tables([strings, more.cast(strings.schema)]), profile_dir / "strings.parquet")
    table = conform(name, data)
    sort = TABLES_BY_NAME[name].sort_by
    if sort and table.num_rows:
        table = table.sort_by([(c, "ascending") for c in sort])
    for old in profile_dir.glob(f"{name}.rank*.parquet"):
        old.unlink()
    _write(table, profile_dir / f"{name}.parquet")
    rows: int = table.num_rows
    meta.table_rows[name] = rows
    write_json_atomic(profile_dir / "meta.json", meta.to_dict())
    return rows
