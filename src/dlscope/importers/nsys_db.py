"""Opening an Nsight Systems SQLite export read-only and asking what it holds.

``nsys export --type sqlite`` writes one table per kind of event; which tables and columns exist
depends on what was traced and on the nsys version. Nothing here assumes a table or column:
:class:`NsysExport` answers ``has(table, column)`` so that readers select what exists and leave the
rest null. A damaged file must end in one :class:`InputError` line, never a traceback: the file
header is checked before SQLite sees the file, and every query goes through :meth:`NsysExport.rows`,
which turns SQLite's errors into InputError.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import struct
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
SUFFIXES = (".sqlite", ".sqlite.gz", ".sqlite3", ".sqlite3.gz")
# Tables only an nsys export has; a database with StringIds and none of these is someone else's.
NSYS_MARKERS = (
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "ANALYSIS_DETAILS",
)
FETCH_ROWS = 200_000  # rows per fetch: bounds memory of the Python row tuples at any moment


def has_nsys_suffix(path: Path) -> bool:
    return path.name.lower().endswith(SUFFIXES)


def _replacing_decode(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class NsysExport:
    """An open export: its tables and columns, ``META_DATA_EXPORT`` and safe queries."""

    def __init__(self, path: Path, con: sqlite3.Connection) -> None:
        self.path = path
        self.con = con
        self.columns: dict[str, set[str]] = {}
        for (name,) in self.rows("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"):
            cols = self.rows(f'PRAGMA table_info("{name}")')
            self.columns[name] = {c[1] for c in cols}
        self.export_meta: dict[str, str] = {}
        if self.has("META_DATA_EXPORT", "name", "value"):
            self.export_meta = {str(k): str(v) for k, v in self.rows("SELECT name, value FROM META_DATA_EXPORT")}

    def has(self, table: str, *columns: str) -> bool:
        cols = self.columns.get(table)
        return cols is not None and all(c in cols for c in columns)

    def col(self, table: str, column: str, expr: str | None = None, alias: str = "") -> str:
        """``expr`` (default: the column, qualified by ``alias``) when ``table`` has ``column``,
        else SQL NULL: lets one SELECT serve exports that lack newer columns."""
        if not self.has(table, column):
            return "NULL"
        return expr or (f"{alias}.{column}" if alias else column)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.iter_rows(sql, params))

    def iter_rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        for chunk in self.chunks(sql, params):
            yield from chunk

    def chunks(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[tuple[Any, ...]]]:
        """The query's rows, at most FETCH_ROWS at a time (so that a large export never exists as
        Python objects all at once). A text value whose bytes are not UTF-8 (a damaged export) reads
        with U+FFFD in their place, as the JSON importers read such names: the query runs again with
        a replacing decoder, from the row it broke at (only then: sqlite3's own decoding is a third
        faster than a Python one, 0.36 against 0.49 s per million names here)."""
        done = 0
        while True:
            try:
                cur = self.con.execute(sql, params)
                if done:
                    cur.fetchmany(done)  # the rows already yielded (the query reads the same rows again)
                while True:
                    chunk = cur.fetchmany(FETCH_ROWS)
                    if not chunk:
                        return
                    done += len(chunk)
                    yield chunk
            except sqlite3.DatabaseError as e:
                if not str(e).startswith("Could not decode to UTF-8") or self.con.text_factory is not str:
                    raise InputError(f"{self.path}: corrupt or truncated SQLite database ({e})") from None
                self.con.text_factory = _replacing_decode  # a value's bytes: read again, replacing them
            except UnicodeDecodeError:  # the bytes are in SQLite's own message (a damaged schema)
                raise InputError(f"{self.path}: corrupt or truncated SQLite database (a damaged schema)") from None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        r = self.rows(sql, params)
        return r[0][0] if r else None

    def version(self) -> str:
        return self.export_meta.get("EXPORT_PRODUCT_VERSION", "unknown version")

    def schema_version(self) -> str:
        return self.export_meta.get("EXPORT_SCHEMA_VERSION", "unknown")


def _check_header(path: Path, shown: Path) -> None:
    """Refuse files that are not SQLite databases or are shorter than their header says (a
    truncated copy), before SQLite reads them: SQLite only notices missing pages when a query
    touches them, sometimes as a silently empty result."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError as e:
        raise InputError(f"{shown}: unreadable ({e.__class__.__name__}: {e})") from None
    if not head.startswith(SQLITE_MAGIC):
        raise InputError(
            f"{shown}: not an SQLite database (expected an Nsight Systems export, "
            "made with 'nsys export --type sqlite')"
        )
    if len(head) < 100:
        raise InputError(f"{shown}: truncated SQLite database ({size} bytes)")
    (page_size,) = struct.unpack(">H", head[16:18])
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages = struct.unpack(">II", head[24:32])
    (valid_for,) = struct.unpack(">I", head[92:96])
    # the page count in the header is trustworthy only when written by the same change
    if pages and valid_for == change_counter and size < pages * page_size:
        raise InputError(f"{shown}: truncated SQLite database ({size} of {pages * page_size} bytes)")
    if page_size and size % page_size:
        raise InputError(f"{shown}: truncated SQLite database ({size} bytes is not a whole number of pages)")


def _gunzip_to(src: Path, dest: Path) -> None:
    try:
        with gzip.open(src, "rb") as g, open(dest, "wb") as out:
            shutil.copyfileobj(g, out, 1 << 20)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{src}: truncated or corrupt gzip file ({e.__class__.__name__}: {e})") from None


@contextmanager
def open_export(path: Path) -> Iterator[NsysExport]:
    """Open ``path`` (``.sqlite``, or gzip-compressed) read-only; raises InputError with one line
    if it is not an intact Nsight Systems export."""
    with tempfile.TemporaryDirectory(prefix="dlscope-nsys-") as tmp:
        db_path = path
        try:
            with open(path, "rb") as f:
                gz = f.read(2) == GZIP_MAGIC
        except OSError as e:
            raise InputError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from None
        if gz:
            db_path = Path(tmp) / "export.sqlite"
            _gunzip_to(path, db_path)
        _check_header(db_path, path)
        try:
            con = sqlite3.connect(db_path.resolve().as_uri() + "?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise InputError(f"{path}: cannot open as SQLite ({e})") from None
        try:
            export = NsysExport(path, con)
            if "StringIds" not in export.columns or not any(t in export.columns for t in NSYS_MARKERS):
                raise InputError(
                    f"{path}: an SQLite database, but not an Nsight Systems export "
                    "(it lacks nsys's StringIds and event tables)"
                )
            yield export
        finally:
            con.close()
