"""Opening a profile and querying it with DuckDB.

:func:`open_profile` validates a finished profile (``meta.json`` plus every table's Parquet
footer: its columns and their types) and never executes anything from it. A table file damaged
past its footer is found when DuckDB first reads it (:func:`attach`, then the analysis' first
read of every table): the same one-line :class:`ProfileFormatError` (:func:`corrupt_table`).
:func:`attach` makes one DuckDB view per table;
the views of tables that carry names add the decoded text (``name``, ``input_shapes``, ``metric``
...), so ``select name, count(*) from kernels group by 1`` works as a user would expect. The raw
tables stay reachable as ``raw_<table>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError, ProfileFormatError
from . import db
from .meta import Meta, load_meta
from .schema import (
    MAX_DURATION_NS,
    MAX_TIME_NS,
    NAME_COLUMNS,
    OPTIONAL_COLUMNS,
    OPTIONAL_TABLES,
    TABLES,
    TABLES_BY_NAME,
    malformed_time_sql,
)

TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns")


@dataclass
class StoredProfile:
    """A finished profile on disk."""

    path: Path
    meta: Meta
    files: dict[str, list[Path]] = field(default_factory=dict)
    absent_columns: dict[str, set[str]] = field(default_factory=dict)  # optional columns the files predate
    # columns stored as a narrower signed integer than the schema's, cast by the views
    narrow_columns: dict[str, set[str]] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)  # rows stored per table, from the files' footers
    # tables whose files' statistics do not rule out malformed times (schema.TIME_RULE): the
    # views leave such rows out (a filter on every table would change DuckDB's plans, and so the
    # order of unordered rows, for every valid profile)
    check_times: set[str] = field(default_factory=set)
    # the one-thread connection that read the footers' statistics, for ProfileData to reuse
    # (a connection costs 30-60 ms to open: as long as a small profile's summary takes to compute)
    connection: duckdb.DuckDBPyConnection | None = field(default=None, repr=False, compare=False)
    # whether attach() decodes names by a lookup in ``string_list`` (see decoded_sql's ``listed``)
    names_listed: bool = False

    @property
    def name(self) -> str:
        return self.path.name


def is_unfinished(path: Path) -> bool:
    """A directory with a spool but no meta.json: recording stopped before finalize."""
    return path.is_dir() and not (path / "meta.json").exists() and (path / "spool").is_dir()


# the opening connection's threads: its first query reads the footers' statistics; the analysis
# raises the count for a large profile (ProfileData)
OPEN_THREADS = 1


def warm_open() -> None:
    """Start the connection :func:`open_profile` will take, in the background (:func:`.db.warm`)."""
    db.warm(OPEN_THREADS)


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
    file_rows: dict[Path, int] = {}
    for spec in TABLES:
        files = sorted(p.glob(f"{spec.name}.parquet")) + sorted(p.glob(f"{spec.name}.rank*.parquet"))
        if not files and spec.name not in OPTIONAL_TABLES:
            raise ProfileFormatError(f"{p}: incomplete profile (table {spec.name} is missing)")
        rows = 0
        for f in files:
            try:
                md = pq.read_metadata(f)
                names = md.schema.names
            except Exception as e:  # pyarrow raises several types for damaged files
                raise ProfileFormatError(f"{f}: corrupt or truncated table file ({e.__class__.__name__})") from None
            rows += md.num_rows  # (the footer was read a second time for this)
            file_rows[f] = md.num_rows
            missing = set(spec.column_names()) - set(names)
            optional = missing & set(OPTIONAL_COLUMNS.get(spec.name, ()))
            if optional:
                prof.absent_columns.setdefault(spec.name, set()).update(optional)
                missing -= optional
            if missing:
                raise ProfileFormatError(f"{f}: table {spec.name} lacks columns {sorted(missing)}")
            try:
                stored = md.schema.to_arrow_schema()
            except Exception as e:  # a damaged Arrow schema in the footer's metadata
                raise ProfileFormatError(f"{f}: corrupt table file ({e.__class__.__name__})") from None
            for col in spec.columns:
                if col.name not in stored.names:
                    continue
                fit = _type_fit(stored.field(col.name).type, col.type)
                if fit is None:
                    raise ProfileFormatError(
                        f"{f}: column {col.name} of table {spec.name} is {stored.field(col.name).type}, not {col.dtype}"
                    )
                if fit == "narrow":
                    prof.narrow_columns.setdefault(spec.name, set()).add(col.name)
        prof.files[spec.name] = files
        prof.rows[spec.name] = rows
    prof.connection = db.connect(threads=OPEN_THREADS)
    ranges = _time_ranges(prof.connection, prof.files, file_rows)
    for spec in TABLES:
        if not _times_plausible([ranges[f] for f in prof.files.get(spec.name, [])]):
            prof.check_times.add(spec.name)
    return prof


# a file's times by its footer's statistics: (least, greatest), EMPTY (no time column or no row)
# or None (statistics missing or not found, which proves nothing)
EMPTY: tuple[()] = ()


def _time_ranges(
    con: duckdb.DuckDBPyConnection, files: dict[str, list[Path]], file_rows: dict[Path, int]
) -> dict[Path, tuple[int, int] | tuple[()] | None]:
    """Each file's least and greatest time (``start_ns``, ``end_ns``, ``ts_ns``) by its footer's
    statistics, read by DuckDB's ``parquet_metadata``: :data:`EMPTY` for a table without a time
    column or a file without rows (``file_rows``, from the footers), None where a statistic is
    missing, is not an INT64's, or was not found for a file with rows (unknown, never "in range").

    Not by pyarrow's footer objects: where a column chunk's physical type in the footer differs
    from the schema's, pyarrow 26's ``RowGroupMetaData.column`` throws a C++ exception that
    Python cannot catch and the process aborts (found by bench/fuzz.py on damaged Parquet bytes).
    DuckDB raises an error there, or refuses the footer, which is the one-line refusal of a
    damaged table file."""
    timed = {
        f: [c for c in TIME_COLUMNS if c in TABLES_BY_NAME[name].column_names()]
        for name, paths in files.items()
        for f in paths
    }
    wanted = [f for f, cols in timed.items() if cols and file_rows.get(f, 1) > 0]
    ranges: dict[Path, tuple[int, int] | tuple[()] | None] = {f: None if f in wanted else EMPTY for f in timed}
    if not wanted:
        return ranges
    query = (
        "SELECT file_name, path_in_schema, type, coalesce(stats_min_value, stats_min), "
        "coalesce(stats_max_value, stats_max) FROM parquet_metadata(?) "
        f"WHERE row_group_num_rows > 0 AND path_in_schema IN {TIME_COLUMNS}"
    )
    try:
        rows = con.execute(query, [[str(f) for f in wanted]]).fetchall()
    except duckdb.Error as whole:
        for f in wanted:  # the file DuckDB refuses, for the error's one line
            try:
                con.execute(query, [[str(f)]]).fetchall()
            except duckdb.Error as e:
                raise corrupt_table_file(f, e) from None
        # every file reads alone but not together: still one line, naming the profile
        raise corrupt_table_file(wanted[0].parent, whole) from None
    by_name = {str(f): f for f in wanted}
    bounds: dict[Path, dict[str, list[tuple[int, int] | None]]] = {}
    for file_name, column, physical, lo, hi in rows:
        named = by_name.get(file_name)
        if named is None or column not in timed[named]:
            continue
        pair = _int_pair(lo, hi) if physical == "INT64" else None
        bounds.setdefault(named, {}).setdefault(column, []).append(pair)
    for f, by_column in bounds.items():
        found = [b for pairs in by_column.values() for b in pairs]
        if set(by_column) != set(timed[f]) or None in found:
            continue  # a time column without statistics: unknown
        ranges[f] = (min(b[0] for b in found), max(b[1] for b in found))  # type: ignore[index]  # None was ruled out just above
    return ranges


def _int_pair(lo: str | None, hi: str | None) -> tuple[int, int] | None:
    """A statistic's min and max as integers; None if either is missing or not an integer."""
    try:
        return int(lo), int(hi)  # type: ignore[arg-type]  # None raises TypeError, caught below
    except (TypeError, ValueError):
        return None


def _times_plausible(ranges: list[tuple[int, int] | tuple[()] | None]) -> bool:
    """Whether the footers' statistics (each file's :func:`_time_range`) show every time of the
    table within ``[0, MAX_TIME_NS]`` and the whole table within ``MAX_DURATION_NS`` of its first
    start (so no row can be malformed by schema.TIME_RULE but for an end before its start, which
    only the builder refuses: its duration is within the same bound). Missing statistics prove
    nothing."""
    if any(r is None for r in ranges):
        return False
    known = [r for r in ranges if r is not None and len(r) == 2]  # () is a file without statistics
    if not known:
        return True
    lo = min(r[0] for r in known)
    hi = max(r[1] for r in known)
    return lo >= 0 and hi <= MAX_TIME_NS and hi - lo <= MAX_DURATION_NS


def _type_fit(stored: pa.DataType, want: pa.DataType) -> str | None:
    """How a column stored as ``stored`` reads as ``want``: "same" (dictionary encoding and large
    strings included), "narrow" (a narrower signed integer, cast losslessly), None (it does not)."""
    if pa.types.is_dictionary(stored):
        stored = stored.value_type
    if stored == want or (pa.types.is_large_string(stored) and pa.types.is_string(want)):
        return "same"
    if pa.types.is_signed_integer(stored) and pa.types.is_signed_integer(want) and stored.bit_width < want.bit_width:
        return "narrow"
    return None


def corrupt_table(profile: StoredProfile, table: str, error: Exception) -> ProfileFormatError:
    """The one-line error for ``table``'s file(s) that DuckDB failed to read (``error``)."""
    files = profile.files.get(table) or []
    return corrupt_table_file(files[0] if len(files) == 1 else f"{profile.path} (table {table})", error)


def corrupt_table_file(where: Path | str, error: Exception) -> ProfileFormatError:
    """The one-line error for a table file (or a table's files: ``where``) DuckDB failed to read."""
    reason = (str(error).strip().splitlines() or [error.__class__.__name__])[0]
    reason = re.sub(r'Failed to read file "[^"]*": ', "", reason)
    reason = re.sub(r"^Invalid Error: ", "", reason)  # DuckDB's error passed on through an Arrow stream
    return ProfileFormatError(f"{where}: corrupt or truncated table file ({reason[:120]})")


def attach(
    profile: StoredProfile, con: duckdb.DuckDBPyConnection | None = None, in_memory: bool = False
) -> duckdb.DuckDBPyConnection:
    """Create the views of ``profile`` in ``con`` (a new connection if None) and return it.

    ``in_memory``: read each table's files once into a temp table ``mem_<table>`` and make
    ``raw_<table>`` a view of it (see ``ProfileData._load_in_memory``). The rows are those of the
    view over the files; reading them straight away binds each file once, where a view over the
    files, then ``<table>`` over it, and then the copy into memory bound it
    three times (a third of the time a small profile took to open)."""
    con = con or db.connect()
    listed = False
    for spec in TABLES:
        absent = profile.absent_columns.get(spec.name, set())
        narrow = profile.narrow_columns.get(spec.name, set())
        cols = ", ".join(
            (
                f'CAST(NULL AS {db.duck_type(c.dtype)}) AS "{c.name}"'
                if c.name in absent
                else f'CAST("{c.name}" AS {db.duck_type(c.dtype)}) AS "{c.name}"'
                if c.name in narrow
                else f'"{c.name}"'
            )
            for c in spec.columns
        )
        # a table whose files' footers count no row is not read at all: its view is the empty one
        # below (most tables of a small imported trace are empty; each view over a file binds it
        # again, 0.7 ms a view, three views a table)
        no_rows = spec.name != "strings" and profile.rows.get(spec.name) == 0
        if profile.files[spec.name] and not no_rows:
            files = "[" + ", ".join(db.sql_str(str(f)) for f in profile.files[spec.name]) + "]"
            src = f"SELECT {cols} FROM read_parquet({files})"
            # rows with NULL in a column the schema requires (times in a profile written before the
            # builder refused them, a damaged file's rank) would trip every analysis: not read;
            # nor rows whose times the builder would not have stored (out of range, an end before
            # the start, too long: schema.TIME_RULE), whose sums overflow int64 in the reports
            required = [c.name for c in spec.columns if not c.nullable and c.name not in absent]
            keep = [f'"{c}" IS NOT NULL' for c in required]
            bad_times = (
                malformed_time_sql([c.name for c in spec.columns if c.name not in absent])
                if spec.name in profile.check_times
                else []
            )
            if bad_times:
                keep.append(f"NOT ({' OR '.join(bad_times)})")
            if keep:
                src += " WHERE " + " AND ".join(keep)
        else:  # a table this profile predates (see schema.OPTIONAL_TABLES), or one without rows
            src = (
                "SELECT "
                + ", ".join(f'CAST(NULL AS {db.duck_type(c.dtype)}) AS "{c.name}"' for c in spec.columns)
                + " WHERE FALSE"
            )
        try:
            if spec.name == "strings":
                con.execute(f"CREATE OR REPLACE TABLE strings AS {src}")
                listed = _list_strings(con)
                continue
            if in_memory and profile.files[spec.name] and not no_rows:
                # in the database, not the connection's temp schema: a second cursor (analysis's
                # prefetch) reads the views over them too
                con.execute(f"CREATE OR REPLACE TABLE mem_{spec.name} AS {src}")
                con.execute(f"CREATE OR REPLACE VIEW raw_{spec.name} AS SELECT * FROM mem_{spec.name}")
            else:
                con.execute(f"CREATE OR REPLACE VIEW raw_{spec.name} AS {src}")
        except duckdb.Error as e:  # a file damaged past the footer pyarrow read (or, read whole, past it)
            raise corrupt_table(profile, spec.name, e) from None
        # <table> is what queries use; analysis may redefine it (steps re-derived from a key node
        # read the rows as stored again by decoded_sql(), not by another view: every view costs its
        # creation, 0.6 ms, on every open)
        con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS {decoded_sql(spec.name, listed=listed)}")
    profile.names_listed = listed
    return con


def _list_strings(con: duckdb.DuckDBPyConnection) -> bool:
    """``string_list``: the profile's strings as one list indexed by id, when the ids are 0..n-1 (as
    the builder interns them); whether they are. A view that decodes names by joining ``strings``
    pays for every join in every query that reads the view, even one that reads no name (11 ms a
    query over the 420k ops of the 504k-event profile, four names each); a lookup in the list is
    computed only where a query reads the name."""
    con.execute(
        "CREATE OR REPLACE TABLE string_list AS SELECT list(value ORDER BY id) AS names, "
        "coalesce(min(id) = 0 AND max(id) = count(*) - 1 AND count(DISTINCT id) = count(*), TRUE) AS dense "
        "FROM strings"
    )
    rows = con.execute("SELECT dense FROM string_list").fetchall()  # (not fetchone: it keeps the result open)
    return bool(rows and rows[0][0])


def decoded_sql(table: str, key: str | None = None, listed: bool = False) -> str:
    """SQL of ``raw_<table>`` with each interned name column decoded from ``strings`` (joined on
    ``key`` too, for views over several profiles whose ids differ; looked up in ``string_list`` where
    ``listed``: one profile whose ids are dense)."""
    names = NAME_COLUMNS.get(table)
    if not names:
        return f"SELECT * FROM raw_{table}"
    if listed and key is None:
        required = {c.name for c in TABLES_BY_NAME[table].columns if not c.nullable}
        extra = []
        for col, idcol in names.items():
            value = f"CASE WHEN t.{idcol} >= 0 THEN list_extract(l.names, t.{idcol} + 1) END"
            if idcol in required:  # as below: an id the strings lack reads as a placeholder
                value = f"coalesce({value}, '<unknown string ' || t.{idcol} || '>')"
            extra.append(f"{value} AS {col}")
        return f"SELECT t.*, {', '.join(extra)} FROM raw_{table} t CROSS JOIN string_list l"
    on_key = f" AND s{{i}}.{key} = t.{key}" if key else ""
    required = {c.name for c in TABLES_BY_NAME[table].columns if not c.nullable}
    joins, extra = [], []
    for i, (col, idcol) in enumerate(names.items()):
        joins.append(f"LEFT JOIN strings s{i} ON s{i}.id = t.{idcol}" + on_key.format(i=i))
        if idcol in required:  # a name every row has: an id that strings lacks (a damaged strings
            # table) reads as a placeholder, not NULL, which the reports do not expect of a name
            extra.append(f"coalesce(s{i}.value, '<unknown string ' || t.{idcol} || '>') AS {col}")
        else:
            extra.append(f"s{i}.value AS {col}")
    return f"SELECT t.*, {', '.join(extra)} FROM raw_{table} t {' '.join(joins)}"
