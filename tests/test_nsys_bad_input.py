"""Damaged, foreign or misnamed Nsight Systems exports: exit code 2 and one line, never a traceback."""

from __future__ import annotations

import gzip
import sqlite3

import pytest

from .conftest import DATA, assert_one_line_error

NSYS_GZ = DATA / "nsys" / "h100_nsys_mlp.sqlite.gz"


def make(kind: str, tmp_path):
    good = gzip.decompress(NSYS_GZ.read_bytes())
    if kind == "truncated_sqlite":
        p = tmp_path / "cut.sqlite"
        p.write_bytes(good[: len(good) // 2])
    elif kind == "truncated_at_a_page_without_size_in_header":
        b = bytearray(good[: 4096 * 40])
        b[92:96] = b"\0\0\0\0"  # the header's page count no longer counts, so SQLite must notice
        p = tmp_path / "cut2.sqlite"
        p.write_bytes(bytes(b))
    elif kind == "corrupt_pages":
        b = bytearray(good)
        b[4096 * 3 : 4096 * 60] = bytes((i * 7919) % 251 for i in range(4096 * 57))
        p = tmp_path / "corrupt.sqlite"
        p.write_bytes(bytes(b))
    elif kind == "truncated_gz":
        p = tmp_path / "cut.sqlite.gz"
        p.write_bytes(NSYS_GZ.read_bytes()[:30000])
    elif kind == "foreign_sqlite":
        p = tmp_path / "other.sqlite"
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")  # one nsys-like name is not enough
        con.execute("CREATE TABLE users (name TEXT)")
        con.commit()
        con.close()
    elif kind == "text_named_sqlite":
        p = tmp_path / "notes.sqlite"
        p.write_text("this is not a database\n")
    elif kind == "gzipped_text_named_sqlite":
        p = tmp_path / "notes.sqlite.gz"
        p.write_bytes(gzip.compress(b"plain text, gzipped\n"))
    elif kind == "empty":
        p = tmp_path / "empty.sqlite"
        p.write_bytes(b"")
    return p


@pytest.mark.parametrize(
    "kind",
    [
        "truncated_sqlite",
        "truncated_at_a_page_without_size_in_header",
        "corrupt_pages",
        "truncated_gz",
        "foreign_sqlite",
        "text_named_sqlite",
        "gzipped_text_named_sqlite",
        "empty",
    ],
)
def test_bad_nsys_exports(cli, tmp_path, kind):
    bad = make(kind, tmp_path)
    out = tmp_path / "out.dlscope"
    r = cli("import", bad, "-o", out)
    assert r.code == 2, r
    assert_one_line_error(r.err)
    assert str(bad.name) in r.err
    assert not out.exists()


def test_messages_say_what_is_wrong(cli, tmp_path):
    said = {
        k: cli("import", make(k, tmp_path), "-o", tmp_path / f"{k}.dlscope").err
        for k in ("truncated_sqlite", "foreign_sqlite", "text_named_sqlite")
    }
    assert "truncated" in said["truncated_sqlite"]
    assert "not an Nsight Systems export" in said["foreign_sqlite"]
    assert "not an SQLite database" in said["text_named_sqlite"]
