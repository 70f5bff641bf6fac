"""The database a command that opens a profile starts in the background (store.db.warm): the
open takes that very connection, configured as one made on the spot, and nothing else takes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from dlscope.store import db

REPO = Path(__file__).resolve().parents[1]


def settings(con) -> tuple:
    return tuple(
        con.execute(f"SELECT current_setting('{s}')").fetchall()[0][0]
        for s in ("threads", "preserve_insertion_order", "asof_loop_join_threshold")
    )


def test_the_next_connection_of_the_same_threads_is_the_warmed_one():
    db.warm(1)
    warmed = db._warm
    assert warmed is not None
    other = db.connect(threads=2)  # another thread count: made on the spot, the warm one kept
    assert db._warm is warmed
    con = db.connect(threads=1)
    assert db._warm is None and con is warmed.made
    assert settings(con) == settings(db._new_connection(1, None)) == (1, True, 0)
    assert settings(other)[0] == 2
    assert db.connect(threads=1) is not con  # taken once


def test_a_memory_limit_is_never_given_the_warmed_connection():
    db.warm(1)
    con = db.connect(threads=1, memory_limit="200MB")
    assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] != ""
    assert db._warm is not None
    assert db.connect(threads=1) is not con
    assert db._warm is None


def test_a_command_that_fails_before_its_open_ends_in_one_line_and_code_2(tmp_path):
    """The database was started for nothing: the process (which waits for that thread, not a daemon)
    still ends with the command's one line and exit code 2."""
    r = subprocess.run(
        [sys.executable, "-m", "dlscope", "summary", str(tmp_path / "none.dlscope")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"dlscope: {tmp_path / 'none.dlscope'}: no such profile"]
