"""A rank of a distributed job that dies, under `dlscope profile -- torchrun ...` (Gloo, on the CPU).

Real 2-rank jobs of tests/programs/ddp_dies.py (a linear layer under DDP):

* rank 1 SIGKILLs itself in step DIE_AT, after that step's all-reduce: rank 0 finishes the step,
  then fails in the next all-reduce, and torchrun stops the job (exit code 1);
* rank 1 stops taking part (sleeps) at step DIE_AT: rank 0 waits in the all-reduce until Gloo's
  timeout (TIMEOUT_S), fails, and torchrun SIGTERMs rank 1;
* the first again with the ranks started by torch.multiprocessing.spawn (no launcher: the
  recorded parent process sees the ranks' exits).

Each rank's steps are counted from the Parquet files with pyarrow, and the statistics and the
advice's step basis are checked against the steps every rank completed, computed here.
"""

from __future__ import annotations

import json
import re
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dlscope.advice.context import Context
from dlscope.analysis.core.context import ProfileData

from .conftest import run_dlscope

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch has no Gloo backend", allow_module_level=True)

PROGRAM = Path(__file__).parent / "programs" / "ddp_dies.py"
DIE_AT = 15
TIMEOUT_S = 3


@dataclass
class Job:
    path: Path
    rc: int
    stdout: str
    stderr: str


def _run(tmp: Path, how: str, spawn: bool = False) -> Job:
    out = tmp / f"{how}.dlscope"
    # --standalone: a free port of torchrun's own choosing (other jobs may run on this machine)
    launch = (
        [PROGRAM, "--spawn", "2"]
        if spawn
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", PROGRAM]
    )
    p = run_dlscope(
        "profile",
        "-o",
        out,
        "--",
        *launch,
        "--steps",
        "40",
        "--die-rank",
        "1",
        "--die-at",
        str(DIE_AT),
        "--how",
        how,
        "--timeout-s",
        str(TIMEOUT_S),
        timeout=240,
    )
    return Job(out, p.returncode, p.stdout, p.stderr)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Job:
    return _run(tmp_path_factory.mktemp("dead"), "kill")


@pytest.fixture(scope="module")
def hung(tmp_path_factory) -> Job:
    return _run(tmp_path_factory.mktemp("dead"), "hang")


def _steps_per_rank(path: Path) -> dict[int, list[int]]:
    """Each rank's recorded step numbers, from the Parquet file itself."""
    t = pq.read_table(path / "steps.parquet", columns=["rank", "step"])
    return {r: sorted(t.filter(pc.equal(t["rank"], r))["step"].to_pylist()) for r in sorted(set(t["rank"].to_pylist()))}


def _meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


def test_the_exit_code_passes_through_and_every_rank_keeps_its_steps(killed):
    assert killed.rc == 1, killed.stderr[-3000:]  # torchrun's exit code for a failed worker
    assert "the job ended abnormally (exit code 1): rank 1 killed by signal 9" in killed.stdout  # profile's summary
    steps = _steps_per_rank(killed.path)
    # rank 1 died in step DIE_AT having completed steps 0..DIE_AT-1; rank 0 completed step DIE_AT too
    assert set(steps) == {0, 1}
    assert abs(len(steps[1]) - DIE_AT) <= 1 and abs(len(steps[0]) - (DIE_AT + 1)) <= 1, steps
    assert steps[1] == list(range(len(steps[1]))) and steps[0] == list(range(len(steps[0])))
    # the program's own word: the last step each rank printed (the ranks share the pipe: one
    # print's text is one write, its newline another, so lines may run together)
    said = [(int(r), int(s)) for r, s in re.findall(r"rank (\d) step (\d+)", killed.stdout)]
    printed = {r: max(s for rr, s in said if rr == r) for r in (0, 1)}
    assert {r: len(s) for r, s in steps.items()} == {r: printed[r] + 1 for r in (0, 1)}


def test_meta_marks_the_dead_rank_its_signal_and_when(killed):
    m = _meta(killed.path)
    end = m["run_end"]
    assert m["exit_code"] == end["exit_code"] == 1 and end["signal"] is None
    ranks = {r["rank"]: r for r in end["ranks"]}
    assert set(ranks) == {0, 1}
    dead = ranks[1]
    assert (dead["signal"], dead["exit_code"], dead["clean_stop"]) == (signal.SIGKILL, 128 + signal.SIGKILL, False)
    assert dead["steps_completed"] == len(_steps_per_rank(killed.path)[1])
    # it died after its last step ended and before the profile did
    last_end = max(
        pq.read_table(killed.path / "steps.parquet")
        .filter(pc.equal(pq.read_table(killed.path / "steps.parquet")["rank"], 1))["end_ns"]
        .to_pylist()
    )
    assert last_end <= dead["end_ns"] <= m["end_ns"]
    assert ranks[0]["exit_code"] not in (None, 0)  # stopped by torchrun, or failed in its all-reduce
    assert ranks[0]["end_ns"] >= dead["end_ns"]  # after rank 1: it was stopped because rank 1 died


def test_summary_names_the_rank_and_keeps_the_common_steps(killed):
    steps = _steps_per_rank(killed.path)
    common = sorted(set(steps[0]) & set(steps[1]))
    extra = sorted(set(steps[0]) ^ set(steps[1]))
    assert extra  # rank 0 finished the step rank 1 died in
    text = run_dlscope("summary", killed.path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if "the job ended abnormally" in ln)
    assert "rank 1 killed by signal 9 (SIGKILL)" in lines[head] and "(exit code 1)" in lines[head]
    assert any("rank 1 (pid" in ln and "SIGKILL" in ln for ln in lines[head : head + 4])
    s = json.loads(run_dlscope("summary", killed.path, "--format", "json").stdout)
    je = s["job_end"]
    assert "rank 1 killed by signal 9 (SIGKILL)" in je["line"]
    dead = next(r for r in je["ranks"] if r["rank"] == 1)
    assert dead["signal"] == signal.SIGKILL and dead["died_s"] > 0
    assert je["excluded_steps"] == extra and set(je["analysed_steps"]) <= set(common)
    # the statistics: over both ranks' steps in common only, as computed here from the Parquet file
    t = pq.read_table(killed.path / "steps.parquet").to_pylist()
    kept = [r for r in t if r["step"] in common and not r["warmup"] and not r["traced"]]
    assert s["steps"]["count"] == len(kept) and s["steps"]["last_step"] == max(r["step"] for r in kept)
    assert s["steps"]["mean_ms"] == pytest.approx(statistics.mean((r["end_ns"] - r["start_ns"]) / 1e6 for r in kept))


def test_the_advice_runs_on_the_common_steps_and_says_how_the_job_ended(killed):
    steps = _steps_per_rank(killed.path)
    common = set(steps[0]) & set(steps[1])
    t = pq.read_table(killed.path / "steps.parquet").to_pylist()
    kept = [r for r in t if r["step"] in common and not r["warmup"] and not r["traced"]]
    basis = Context(ProfileData.open(killed.path)).basis
    assert basis.stat_steps == len(kept)
    assert basis.mean_step_ms == pytest.approx(statistics.mean((r["end_ns"] - r["start_ns"]) / 1e6 for r in kept))
    text = run_dlscope("advise", killed.path)
    assert text.returncode == 0, text.stderr
    assert "the job ended abnormally" in text.stdout.splitlines()[0] and "rank 1 killed by signal 9" in text.stdout
    as_json = run_dlscope("advise", killed.path, "--format", "json")
    assert isinstance(json.loads(as_json.stdout), list)  # the findings, as before
    assert "rank 1 killed by signal 9" in as_json.stderr


def test_a_rank_stuck_in_a_collective_until_gloos_timeout(hung):
    assert hung.rc == 1, hung.stderr[-3000:]
    assert "Timed out" in hung.stderr or "timeout" in hung.stderr.lower()
    steps = _steps_per_rank(hung.path)
    assert {r: len(s) for r, s in steps.items()} == {0: DIE_AT, 1: DIE_AT}  # step DIE_AT never completed
    ranks = {r["rank"]: r for r in _meta(hung.path)["run_end"]["ranks"]}
    # rank 0 failed when the all-reduce timed out; then torchrun stopped rank 1, which stopped cleanly
    assert ranks[0]["exit_code"] == 1 and ranks[0]["signal"] is None
    assert ranks[1]["signal"] == signal.SIGTERM and ranks[1]["clean_stop"]
    wait_s = (ranks[0]["end_ns"] - max(pq.read_table(hung.path / "steps.parquet")["end_ns"].to_pylist())) / 1e9
    assert wait_s >= TIMEOUT_S * 0.9  # it waited the timeout out
    s = json.loads(run_dlscope("summary", hung.path, "--format", "json").stdout)
    assert s["job_end"]["line"].startswith("the job ended abnormally (exit code 1): rank 0 exit code 1")
    assert s["job_end"]["excluded_steps"] == []


def test_a_rank_started_by_mp_spawn_that_dies(tmp_path):
    job = _run(tmp_path, "kill", spawn=True)
    assert job.rc == 1, job.stderr[-3000:]  # mp.spawn's ProcessExitedException
    steps = _steps_per_rank(job.path)
    assert abs(len(steps[1]) - DIE_AT) <= 1 and abs(len(steps[0]) - (DIE_AT + 1)) <= 1, steps
    ranks = {r["rank"]: r for r in _meta(job.path)["run_end"]["ranks"]}
    assert (ranks[1]["signal"], ranks[1]["clean_stop"], ranks[1]["steps_completed"]) == (
        signal.SIGKILL,
        False,
        len(steps[1]),
    )
    assert "rank 1 killed by signal 9 (SIGKILL)" in job.stdout
