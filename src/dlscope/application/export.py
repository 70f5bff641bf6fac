"""The `export` use case: a profile as a timeline (Perfetto / chrome://tracing) or as raw tables.

What the files hold is the renderers' (``render.timeline``, ``render.raw``); this opens the profile
without a step selection (both show every event) and stands between them and a damaged table file:
a file damaged past its footer fails the streaming read halfway, and then what was written goes and
the file is named in one line, without reading every row twice to find it first.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.core.context import ProfileData
    from ..render.timeline import StepWindow
    from ..store.reader import StoredProfile


def open_for_export(path: str) -> ProfileData:
    """The profile, every event of it (no step selection for statistics)."""
    from .open import open_for_analysis

    return open_for_analysis(path, statistics=False)


def export_window(text: str | None) -> StepWindow | None:
    """``--steps A:B`` as the renderers' window, or None."""
    from ..render.timeline import StepWindow
    from .profile import step_window

    return StepWindow(*step_window(text)) if text else None


def _read_error(e: BaseException) -> bool:
    """Whether ``e`` is a failed read of a table file: DuckDB's error, pyarrow's, or the OSError
    without an errno that pyarrow raises for an error DuckDB passes through an Arrow stream
    ("Invalid Error: TProtocolException: ..."; a failed write of the output has an errno)."""
    import duckdb
    import pyarrow as pa

    if isinstance(e, (duckdb.Error, pa.ArrowException)):
        return True
    return isinstance(e, OSError) and e.errno is None


@contextlib.contextmanager
def damaged_tables_refused(data: ProfileData, out: Path) -> Iterator[None]:
    """Around an export of ``data`` to ``out``: a read that fails on a damaged table file removes what
    was written and raises the one-line ProfileFormatError naming the file."""
    from ..store.reader import corrupt_table

    existed = out.exists()
    try:
        yield
    except Exception as e:
        if not _read_error(e):
            raise
        if not existed:
            if out.is_dir():
                shutil.rmtree(out, ignore_errors=True)
            else:
                out.unlink(missing_ok=True)
        text = str(e)
        table = next((t for t, fs in data.stored.files.items() if any(f.name in text for f in fs)), None)
        if table is None:  # DuckDB did not name the file: the first table that fails to read
            table = _unreadable_table(data.stored)
        raise corrupt_table(data.stored, table or "?", e) from None


def _unreadable_table(stored: StoredProfile) -> str | None:
    """The first table whose files fail to read whole. On a connection of its own: the export's
    connection may still hold the result stream that failed, and then takes no other query."""
    import duckdb

    from ..store import db

    con = db.connect(threads=1)
    try:
        for table, files in stored.files.items():
            if not files:
                continue
            try:
                db.query_arrow(
                    con, "SELECT * FROM read_parquet([" + ", ".join(db.sql_str(str(f)) for f in files) + "])"
                )
            except duckdb.Error:
                return table
    finally:
        con.close()
    return None
