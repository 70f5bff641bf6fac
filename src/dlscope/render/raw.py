"""The profile's tables as CSV or Parquet files, names decoded (``dlscope export --type csv``)."""

from __future__ import annotations

from pathlib import Path

from ..analysis.core.context import ProfileData
from ..store import db
from ..store.schema import NAME_COLUMNS, TABLES
from .timeline.events import StepWindow

FORMATS = {"csv": "(FORMAT csv, HEADER true)", "parquet": "(FORMAT parquet, COMPRESSION zstd)"}


def export_tables(data: ProfileData, out_dir: Path, fmt: str, window: StepWindow | None = None) -> list[Path]:
    """Write every event table to ``out_dir/TABLE.{csv,parquet}`` (the ``*_id`` columns replaced by
    the text they stand for) and return the files. ``window`` keeps the rows of those steps."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for spec in TABLES:
        if spec.name == "strings":
            continue
        text_of = {idcol: text for text, idcol in NAME_COLUMNS.get(spec.name, {}).items()}
        cols = [text_of.get(c, c) for c in spec.column_names()]
        # kernel_metrics has no step: its rows describe kernels, not events of a step
        where = window.sql() if window and "step" in spec.column_names() else "TRUE"
        path = out_dir / f"{spec.name}.{fmt}"
        tmp = path.with_name(path.name + ".tmp")
        select = ", ".join(f'"{c}"' for c in cols)
        data.con.execute(
            f"COPY (SELECT {select} FROM {spec.name} WHERE {where}) TO {db.sql_str(str(tmp))} {FORMATS[fmt]}"
        )
        tmp.replace(path)
        files.append(path)
    return files
