"""Many profiles queried as one: every table of every profile, with a ``profile`` column.

A fleet is a folder holding profiles (at any depth) or a glob matching profile directories. Each
table becomes one DuckDB view over all the profiles' Parquet files at once (``read_parquet`` of a
file list: DuckDB scans them in parallel and never loads a table whole). Names are interned per
profile, so ``strings`` carries the profile too and the decoded views join on (profile, id).

The same files are what a distributed engine reads when one machine is not enough
(``docs/fleet.md``: Dask, one partition per file).
"""

from __future__ import annotations

import glob
from pathlib import Path

import duckdb

from ..errors import InputError
from . import db
from .reader import StoredProfile, decoded_sql, is_unfinished, open_profile
from .schema import TABLES


def is_profile(path: Path) -> bool:
    return path.is_dir() and (path / "meta.json").is_file()


def is_fleet(spec: str) -> bool:
    """A glob, or a directory that is not itself a profile (nor an unfinished recording)."""
    p = Path(spec)
    if glob.has_magic(spec):
        return not p.exists()
    return p.is_dir() and not is_profile(p) and not is_unfinished(p)


def find_profiles(spec: str) -> tuple[list[Path], list[Path]]:
    """The finished profiles a folder or glob names, sorted, and the unfinished recordings
    (a spool without meta.json) it also holds. Raises InputError when there is no profile."""
    if glob.has_magic(spec):
        roots = [Path(m) for m in sorted(glob.glob(spec, recursive=True))]
    else:
        roots = [Path(spec)]
        if not roots[0].is_dir():
            raise InputError(f"{spec}: no such profile or folder")
    found: list[Path] = []
    unfinished: list[Path] = []
    for root in roots:
        if is_profile(root):
            found.append(root)
        elif is_unfinished(root):
            unfinished.append(root)
        elif root.is_dir():
            for meta in sorted(root.rglob("meta.json")):
                if meta.parent.name != "spool":
                    found.append(meta.parent)
            unfinished += sorted(s.parent for s in root.rglob("spool") if is_unfinished(s.parent))
    found = sorted(set(found))
    if not found:
        raise InputError(
            f"{spec}: no dlscope profile there"
            + (
                f" ({len(unfinished)} unfinished recording(s): run 'dlscope summary' on each to finalize it)"
                if unfinished
                else ""
            )
        )
    return found, sorted(set(unfinished))


def attach_fleet(
    profiles: list[StoredProfile], con: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """Create, in ``con``, one view per table over every profile, with a ``profile`` column (the
    profile's path as found). ``raw_<table>`` keeps the ids; ``<table>`` adds the decoded names;
    ``profiles`` lists each profile with its source and its start and end (from meta.json)."""
    con = con or db.connect()
    files, labels = [], []
    for prof in profiles:
        for spec in TABLES:
            for f in prof.files[spec.name]:
                files.append(str(f.resolve()))
                labels.append(str(prof.path))
    con.execute(
        "CREATE OR REPLACE TEMP TABLE fleet_files AS SELECT unnest($1::VARCHAR[]) AS file, "
        "unnest($2::VARCHAR[]) AS profile",
        [files, labels],
    )
    con.execute(
        "CREATE OR REPLACE TEMP TABLE profiles AS SELECT unnest($1::VARCHAR[]) AS profile, "
        "unnest($2::VARCHAR[]) AS source, unnest($3::BIGINT[]) AS start_ns, unnest($4::BIGINT[]) AS end_ns",
        [
            [str(p.path) for p in profiles],
            [p.meta.source or "" for p in profiles],
            [p.meta.start_ns for p in profiles],
            [p.meta.end_ns for p in profiles],
        ],
    )
    for spec in TABLES:
        paths = [str(f.resolve()) for p in profiles for f in p.files[spec.name]]
        # optional columns (store.schema.OPTIONAL_COLUMNS) some profiles predate: matched by name
        # (NULL in the files without them), and NULL outright when no file has them
        having = [p for p in profiles if p.files[spec.name]]
        absent = {
            c for c in spec.column_names() if having and all(c in p.absent_columns.get(spec.name, ()) for p in having)
        }
        some_absent = any(p.absent_columns.get(spec.name) for p in having)
        cols = ", ".join(f'NULL::{c.duck} AS "{c.name}"' if c.name in absent else f'r."{c.name}"' for c in spec.columns)
        src = (
            f"SELECT f.profile, {cols} FROM read_parquet({_list(paths)}, filename = true"
            f"{', union_by_name = true' if some_absent else ''}) r JOIN fleet_files f ON f.file = r.filename"
        )
        if not paths:  # a table no profile has (written before it existed, e.g. tries): empty
            typed = ", ".join(f'NULL::{c.duck} AS "{c.name}"' for c in spec.columns)
            src = f"SELECT NULL::VARCHAR AS profile, {typed} WHERE FALSE"
        if spec.name == "strings":
            con.execute(f"CREATE OR REPLACE TEMP TABLE strings AS {src}")
            continue
        con.execute(f"CREATE OR REPLACE VIEW raw_{spec.name} AS {src}")
        con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS {decoded_sql(spec.name, key='profile')}")
    return con


def open_fleet(spec: str) -> tuple[duckdb.DuckDBPyConnection, list[StoredProfile], list[Path]]:
    """Validate every profile a folder or glob names and attach them all; returns the connection,
    the profiles and the unfinished recordings left out."""
    paths, unfinished = find_profiles(spec)
    profiles = [open_profile(p) for p in paths]
    return attach_fleet(profiles), profiles, unfinished


def _list(paths: list[str]) -> str:
    return "[" + ", ".join(db.sql_str(p) for p in paths) + "]"
