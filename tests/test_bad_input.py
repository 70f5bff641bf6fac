"""Every bad input ends in exactly one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json
import sys
import time

import pytest

import dlscope
from dlscope.store.schema import FORMAT_VERSION

from .conftest import assert_one_line_error, run_dlscope


@pytest.fixture(scope="module")
def good_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "good.dlscope"
    with dlscope.profile(path) as prof:
        for _ in range(3):
            with prof.phase("run"):
                time.sleep(0.001)
            prof.step()
    return path


def copy_profile(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def damage(kind: str, good, tmp_path):
    p = copy_profile(good, tmp_path / "bad.dlscope")
    if kind == "truncated_table":
        f = p / "phases.parquet"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif kind == "missing_table":
        (p / "kernels.parquet").unlink()
    elif kind == "garbage_meta":
        (p / "meta.json").write_text("{not json")
    elif kind == "foreign_meta":
        (p / "meta.json").write_text(json.dumps({"hello": "world"}))
    elif kind == "newer_format":
        m = json.loads((p / "meta.json").read_text())
        m["format_version"] = FORMAT_VERSION + 1
        (p / "meta.json").write_text(json.dumps(m))
    elif kind == "table_is_not_parquet":
        (p / "steps.parquet").write_text("PAR1 this is not parquet")
    elif kind == "corrupt_spool":
        (p / "meta.json").unlink()
        (p / "spool").mkdir()
        (p / "spool" / "1.session.json").write_text(
            json.dumps({"pid": 1, "rank": 0, "start_ns": 1, "clock": {"offset_ns": 0}, "settings": {}})
        )
        (p / "spool" / "1.events.spool").write_bytes(b"garbage!" * 10)
    return p


@pytest.mark.parametrize(
    "kind",
    [
        "truncated_table",
        "missing_table",
        "garbage_meta",
        "foreign_meta",
        "newer_format",
        "table_is_not_parquet",
        "corrupt_spool",
    ],
)
def test_damaged_profiles(cli, good_profile, tmp_path, kind):
    bad = damage(kind, good_profile, tmp_path)
    r = cli("summary", bad)
    assert r.code == 2, r
    assert_one_line_error(r.err)


def test_missing_path_file_and_empty_dir(cli, tmp_path):
    for target in (tmp_path / "nope.dlscope", tmp_path / "file.json", tmp_path / "empty"):
        if target.name == "file.json":
            target.write_text("{}")
        if target.name == "empty":
            target.mkdir()
        r = cli("summary", target)
        assert r.code == 2
        assert_one_line_error(r.err)


@pytest.mark.parametrize(
    "args",
    [
        ["summary"],
        ["bogus-command"],
        ["summary", "--format", "xml", "x"],
        ["profile"],
        ["profile", "--steps", "9:2", "--", "python", "x.py"],
        ["profile", "--batch-size", "0", "--", "python", "x.py"],
        ["profile", "--", "/no/such/program"],
        ["summary", "--iter-start", "abc", "x"],
        ["sql"],
    ],
)
def test_bad_flags_and_commands(cli, tmp_path, args, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    assert r.code == 2, r
    assert_one_line_error(r.err)


def test_bad_sql_and_bad_iteration_range(cli, good_profile):
    r = cli("sql", good_profile, "select * from no_such_table")
    assert r.code == 2
    assert_one_line_error(r.err)
    r = cli("summary", good_profile, "--iter-start", "5", "--iter-stop", "2")
    assert r.code == 2
    assert_one_line_error(r.err)
    for cmd in (["summary"], ["advise"], ["stats", "--report", "step_sum"]):  # a range past the last step
        r = cli(*cmd[:1], good_profile, *cmd[1:], "--iter-start", "10000")
        assert r.code == 2 and "select no step: the profile has steps" in r.err
        assert_one_line_error(r.err)


def test_existing_output_is_not_overwritten_without_force(tmp_path, good_profile):
    r = run_dlscope("profile", "-o", good_profile, "--", sys.executable, "-c", "pass")
    assert r.returncode == 2
    assert_one_line_error(r.stderr)
    assert (good_profile / "meta.json").exists()


def test_sql_formats(cli, good_profile):
    # the program's own phases (torch, when an earlier test imported it, adds its tracing window:
    # a dlscope phase too, of domain 'trace')
    r = cli(
        "sql",
        good_profile,
        "select name, count(*) as n from phases where coalesce(domain, '') <> 'trace' group by name",
        "--format",
        "csv",
    )
    assert r.code == 0 and r.out.splitlines() == ["name,n", "run,3"]
    r = cli("sql", good_profile, "select step from steps order by step", "--format", "json")
    assert json.loads(r.out) == [{"step": 0}, {"step": 1}, {"step": 2}]
    r = cli("sql", good_profile, "select count(*) as n from steps")
    assert r.code == 0 and "3" in r.out


def test_a_profile_still_being_recorded_is_not_finalized_under_its_recorder(tmp_path, cli):
    """Opening a profile whose program is still running refuses (exit 2) and leaves the spool
    alone; it used to finalize it, deleting the spool under the live recorder, which then died
    with a traceback at exit and lost the rest of the run. Once the recorder stops, the same
    command finalizes the profile."""
    from dlscope.capture.session import Session, Settings

    path = tmp_path / "live.dlscope"
    session = Session(path, Settings(), owner="api", collectors=[])
    session.start()
    try:
        r = cli("summary", path)
        assert r.code == 2
        assert_one_line_error(r.err)
        assert "still being recorded" in r.err
        assert (path / "spool").is_dir() and not (path / "meta.json").exists()
    finally:
        session.stop()
    r = cli("summary", path)
    assert r.code == 0, r.err
    assert (path / "meta.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times come from /proc")
def test_a_pid_reused_after_the_recording_began_is_not_its_recorder(tmp_path):
    """A killed program's pid may later belong to another process: one that started after the
    recording began is not its recorder, so the profile is finalized, not refused forever."""
    import os
    import socket

    from dlscope.store.spool import live_recorders

    spool = tmp_path / "spool"
    spool.mkdir()
    me = os.getpid()  # alive, started a moment ago
    info = spool / f"{me}.session.json"
    info.write_text(json.dumps({"pid": me, "host": socket.gethostname(), "start_ns": time.time_ns()}))
    assert live_recorders(spool) == [me]
    info.write_text(json.dumps({"pid": me, "host": socket.gethostname(), "start_ns": 1_000_000_000}))  # 1970
    assert live_recorders(spool) == []
    info.write_text(json.dumps({"pid": me, "host": "another-host", "start_ns": time.time_ns()}))
    assert live_recorders(spool) == []
