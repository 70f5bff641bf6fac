"""dlscope try --baseline PROFILE (issue 38, "Reuse"): a recent profile of the same command gives the
advice, so nothing is profiled again; round 1's baseline runs unprofiled like every other round's (a
`dlscope profile` run warms up and traces otherwise than a try run: its steps are not compared). A
profile of another command, one without steps, a missing or damaged one: refused in one line (exit 2)
before anything runs. On the CPU with the probe program, its loading slowed so that input_bound
fires and `auto` has a fix to choose."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from dlscope.analysis.core.context import ProfileData

from .conftest import assert_one_line_error, run_dlscope

PROBE = Path(__file__).parent / "programs" / "fix_probe.py"
SLOW = {"PROBE_SLOW_INPUT_MS": "20", "DLSCOPE_NO_CACHE": "1"}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(profile, records file) of `dlscope profile -- python fix_probe.py RECORDS`."""
    with pytest.MonkeyPatch.context() as mp:
        for k, v in SLOW.items():
            mp.setenv(k, v)
        home = tmp_path_factory.mktemp("baseline")
        records = home / "probe.jsonl"
        prof = home / "base.dlscope"
        r = run_dlscope("profile", "-o", prof, "--", sys.executable, PROBE, records, cwd=home, timeout=300)
    assert r.returncode == 0, r.stderr
    return prof, records


def _try(home: Path, baseline: Path, records: Path, *extra: str):
    with pytest.MonkeyPatch.context() as mp:
        for k, v in SLOW.items():
            mp.setenv(k, v)
        return run_dlscope(
            "try",
            "--fixes",
            "auto",
            "--steps",
            "3",
            "--repeat",
            "1",
            "--baseline",
            baseline,
            "-o",
            home / "t.try",
            "--format",
            "json",
            *extra,
            "--",
            sys.executable,
            PROBE,
            records,
            cwd=home,
            timeout=300,
        )


def _runs_recorded(records: Path) -> Counter[str]:
    """Steps recorded per run (the probe's records name the run's profile folder)."""
    return Counter(json.loads(line)["run"] for line in records.read_text().splitlines())


def test_the_given_profile_chooses_the_fixes_and_nothing_is_profiled(made: tuple[Path, Path]) -> None:
    prof, records = made
    # what the profile's own advice says, read independently from `dlscope advise --format json`
    adv = run_dlscope("advise", prof, "--format", "json")
    assert adv.returncode == 0, adv.stderr
    advice = {f["id"]: f for f in json.loads(adv.stdout)}
    assert advice["input_bound"]["try"]["fixes"] == ["workers"]
    advised = sorted(
        {fix for f in advice.values() if (f["saving_pct"] or 0) > 0 for fix in f["try"]["fixes"]}
    )  # auto's choice: the fixes of the findings that fired
    before = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in prof.iterdir())
    seen = _runs_recorded(records)

    r = _try(prof.parent, prof, records)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["advice_from"] == str(prof)
    assert [f["name"] for f in out["fixes"]] == advised == ["workers"]
    fix = out["fixes"][0]
    assert fix["predicted_saving_pct"] == pytest.approx(advice["input_bound"]["saving_pct"], rel=1e-9)
    # two runs, both unprofiled: round 1's baseline and the fix; no profiled first run
    assert [(x["label"], x["round"]) for x in out["runs"]] == [("baseline", 0), ("workers", 0)]
    for x in out["runs"]:
        assert x["exit_code"] == 0 and x["steps"] == 3
        data = ProfileData.open(x["profile"])
        assert not data.has("ops") and data.scalar("SELECT count(*) FILTER (WHERE traced) FROM steps") == 0
    # the program ran exactly twice more (the probe's own records), each stopped alike after warm-up + 3 steps
    # (the probe writes its record after the optimizer's step, where the run is stopped: the last is not
    # written), never the 40 steps of a run that is not stopped
    now = _runs_recorded(records) - seen
    assert sorted(now) == ["baseline.0.dlscope", "workers.0.dlscope"]
    assert len(set(now.values())) == 1 and 6 + 3 - 1 <= min(now.values()) < 40
    # the outcomes go into round 1's baseline profile; the given profile is left as it was
    assert ProfileData.open(Path(out["runs"][0]["profile"])).has("tries")
    assert sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in prof.iterdir()) == before


def test_a_profile_of_another_command_is_refused_before_anything_runs(made: tuple[Path, Path], tmp_path: Path) -> None:
    prof, records = made
    other = tmp_path / "other.jsonl"  # another argument: another command
    r = _try(tmp_path, prof, other)
    assert r.returncode == 2 and "made from another command" in r.stderr
    assert_one_line_error(r.stderr)
    assert not other.exists() and not (tmp_path / "t.try").exists()


def test_a_missing_or_damaged_profile_is_refused(made: tuple[Path, Path], tmp_path: Path) -> None:
    prof, records = made
    r = _try(tmp_path, tmp_path / "nowhere.dlscope", records)
    assert r.returncode == 2 and "no such profile" in r.stderr
    assert_one_line_error(r.stderr)
    broken = tmp_path / "broken.dlscope"
    shutil.copytree(prof, broken)
    steps = broken / "steps.parquet"
    steps.write_bytes(steps.read_bytes()[: os.path.getsize(steps) // 2])  # truncated
    r = _try(tmp_path, broken, records)
    assert r.returncode == 2 and "steps.parquet" in r.stderr
    assert_one_line_error(r.stderr)
    (broken / "meta.json").write_text("{not json")
    r = _try(tmp_path, broken, records)
    assert r.returncode == 2
    assert_one_line_error(r.stderr)
    assert not (tmp_path / "t.try").exists()


def test_a_profile_without_steps_is_refused(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "pass"]
    r = run_dlscope("profile", "-o", tmp_path / "p.dlscope", "--", *cmd, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_dlscope("try", "--baseline", tmp_path / "p.dlscope", "-o", tmp_path / "t.try", "--", *cmd, cwd=tmp_path)
    assert r.returncode == 2 and "no steps" in r.stderr
    assert_one_line_error(r.stderr)
    assert not (tmp_path / "t.try").exists()
