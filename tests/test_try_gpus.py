"""dlscope try on several GPUs at once (issue 38): rounds placed one per GPU, each round's runs on its
own GPU (so its pairs compare runs on one device), rounds on different GPUs at the same time, CPUs
split between them; the choice of GPUs (asked, idle by NVML, none for a command that starts ranks).
On the CPU the GPUs are names in CUDA_VISIBLE_DEVICES that the probe program records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from dlscope.application.try_placement import launches_ranks, parse_gpus, placements, split_cpus
from dlscope.errors import UsageError

from .conftest import run_dlscope
from .fake_nvml import FakeGpu, FakeNvml

PROBE = Path(__file__).parent / "programs" / "fix_probe.py"


def test_cpus_are_split_into_disjoint_even_shares():
    shares = split_cpus(3, range(8))
    assert [sorted(s) for s in shares] == [[0, 1], [2, 3, 4], [5, 6, 7]]
    assert split_cpus(4, [0, 1]) == []  # fewer CPUs than rounds: nothing pinned
    assert split_cpus(2, [5, 9]) == [frozenset({5}), frozenset({9})]


def test_the_gpus_flag():
    assert parse_gpus("auto") is None
    assert parse_gpus("0, 1") == ["0", "1"]
    assert parse_gpus("GPU-abc,1") == ["GPU-abc", "1"]
    for bad in ("", "0,0", "cuda:0"):
        with pytest.raises(UsageError):
            parse_gpus(bad)


def test_commands_that_start_ranks_keep_every_gpu():
    assert launches_ranks(["torchrun", "--nproc-per-node", "8", "train.py"])
    assert launches_ranks([sys.executable, "-m", "torch.distributed.run", "train.py"])
    assert launches_ranks(["/usr/bin/accelerate", "launch", "train.py"])
    assert not launches_ranks([sys.executable, "train.py", "--torchrun-like-flag"])
    assert placements(["torchrun", "train.py"], None) == []  # auto: one after another
    with pytest.raises(UsageError):
        placements(["torchrun", "train.py"], ["0", "1"])


class _Nvml(FakeNvml):
    """The fake NVML with the compute processes each GPU runs."""

    def __init__(self, gpus: list[FakeGpu], processes: dict[str, int]) -> None:
        super().__init__(lambda: 0, gpus)
        self.processes = processes

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[object]:
        return [object()] * self.processes.get(h.uuid, 0)


def test_auto_takes_the_visible_idle_gpus_by_uuid(monkeypatch):
    uuid = "GPU-{}0000000-0000-0000-0000-000000000000".format
    gpus = [FakeGpu(uuid=uuid(i)) for i in range(4)]
    gpus[2].base["gpu_util"] = 97.0  # busy with another job's kernels
    monkeypatch.setitem(sys.modules, "dlscope_try_nvml", _Nvml(gpus, {uuid(3): 1}))  # one running a process
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    where = placements([sys.executable, "train.py"], None, nvml_module="dlscope_try_nvml")
    assert [p.gpus for p in where] == [uuid(0), uuid(1)]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # only what this process may see
    assert placements([sys.executable, "train.py"], None, nvml_module="dlscope_try_nvml") == []
    assert placements([sys.executable, "train.py"], None, nvml_module="no_such_nvml_module") == []


def _try_on_two_gpus(tmp_path: Path, rounds: int) -> tuple[subprocess.CompletedProcess[str], dict[str, list[dict]]]:
    """`dlscope try --gpus 0,1 --fixes tf32` on the probe, exactly ``rounds`` rounds; its result and the
    probe's records per run (``LABEL.ROUND``)."""
    records = tmp_path / "probe.jsonl"
    r = run_dlscope(
        "try", "--gpus", "0,1", "--fixes", "tf32", "--steps", "3", "--repeat", str(rounds), "--no-combined",
        "-o", tmp_path / "t.try", "--format", "json", "--", sys.executable, PROBE, records, cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    runs: dict[str, list[dict]] = defaultdict(list)
    for line in records.read_text().splitlines():
        rec = json.loads(line)
        runs[rec["run"].removesuffix(".dlscope")].append(rec)
    return r, runs


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_rounds_run_at_once_one_per_gpu_and_pair_on_their_gpu(tmp_path):
    r, runs = _try_on_two_gpus(tmp_path, 3)
    assert sorted(runs) == ["baseline.0", "baseline.1", "baseline.2", "tf32.0", "tf32.1", "tf32.2"]
    gpu = {run: {x["gpus"] for x in recs} for run, recs in runs.items()}
    # round 0 (the profiled baseline with its fix) and round 2 on the first GPU, round 1 on the second
    assert gpu == {"baseline.0": {"0"}, "tf32.0": {"0"}, "baseline.2": {"0"}, "tf32.2": {"0"},
                   "baseline.1": {"1"}, "tf32.1": {"1"}}  # fmt: skip
    cpus = {run: {tuple(x["cpus"]) for x in recs} for run, recs in runs.items()}
    assert len(cpus["tf32.0"]) == len(cpus["tf32.1"]) == 1
    assert not set(next(iter(cpus["tf32.0"]))) & set(next(iter(cpus["tf32.1"])))  # disjoint shares
    # rounds 0 and 1 ran their fix at the same time: each process started before the other's last step
    life = {run: (runs[run][0]["started"], max(x["t"] for x in runs[run])) for run in runs}

    def together(a: str, b: str) -> bool:
        return life[a][0] < life[b][1] and life[b][0] < life[a][1]

    assert together("tf32.0", "tf32.1")
    # round 1's baseline ran on the second GPU while the first run was profiled on the first, and the
    # fixes waited for the profile's advice
    assert together("baseline.0", "baseline.1")
    assert min(life["tf32.0"][0], life["tf32.1"][0]) > max(life["baseline.0"][1], life["baseline.1"][1])
    out = json.loads(r.stdout)
    assert out["rounds"] == 3 and [f["name"] for f in out["fixes"]] == ["tf32"]


def test_each_gpu_takes_its_next_run_when_free(tmp_path, monkeypatch):
    """The rounds on two GPUs do not wait for each other run by run: with the fix's runs 3 s slower, rounds
    2 (baseline, then tf32, on the first GPU) and 3 (tf32, then baseline, on the second) overlap their
    tf32 runs (in step, round 2's tf32 run would wait for round 3's to end)."""
    monkeypatch.setenv("PROBE_SLOW_LABEL", "tf32")
    monkeypatch.setenv("PROBE_SLOW_S", "3")
    r, runs = _try_on_two_gpus(tmp_path, 4)
    assert len(runs) == 8
    life = {run: (recs[0]["started"], max(x["t"] for x in recs)) for run, recs in runs.items()}
    assert {x["gpus"] for x in runs["tf32.2"]} == {"0"} and {x["gpus"] for x in runs["tf32.3"]} == {"1"}
    assert life["tf32.2"][0] < life["tf32.3"][1]  # started while the other GPU's slow run still ran
    assert "dlscope try: run 1: baseline (profiled)" in r.stderr  # progress on stderr with --format json


def test_a_gpus_next_run_starts_ahead_and_waits_for_the_last_to_end(tmp_path):
    """Each queue's next run is started while the last one runs (its interpreter up, torch imported)
    and goes on into its program only once that one has ended: on one GPU, never two programs at once."""
    r, runs = _try_on_two_gpus(tmp_path, 3)
    out = json.loads(r.stdout)
    clocks = {f"{x['label']}.{x['round']}": x["clock"] for x in out["runs"]}
    life = {
        run: (recs[0]["process_started"], recs[0]["started"], max(x["t"] for x in recs)) for run, recs in runs.items()
    }
    ahead = [run for run, c in clocks.items() if c["waited_s"] is not None]
    # the first two rounds' runs each start a queue (round 1's baseline beside the profiled run); round
    # 2, the last round, alone in its batch after a look: its first run started ahead as the first GPU's
    # last run of rounds 0-1 went on, held through the look, its second as its first went on
    assert sorted(ahead) == ["baseline.2", "tf32.2"]
    for run in ahead:
        gpu = runs[run][0]["gpus"]
        # the run of the same GPU just before it: it started before that one ended, its program after
        prev = max(
            (o for o in runs if runs[o][0]["gpus"] == gpu and life[o][2] < life[run][2]), key=lambda o: life[o][2]
        )
        assert life[run][0] < life[prev][2] < life[run][1], (run, prev)
        assert clocks[run]["waited_s"] > 0 and clocks[run]["to_first_step_end_s"] is not None
    assert "started ahead" in r.stderr and "called off" not in r.stderr
    # they imported ahead the modules of torch's package the first runs had imported by their last
    # step, one the probe imports only after its first step among them (those runs had not); not the
    # interpreter's library module it imports then too
    assert all(runs[o][0]["late_torch_at_start"] == (o in ahead) for o in runs)
    assert not any(runs[o][0]["wave_at_start"] for o in runs)
    assert not list(tmp_path.glob("t.try/*.dlscope/.preimport"))  # its list is not left in the profile


def test_a_run_called_off_before_its_turn_runs_nothing_and_leaves_nothing(tmp_path):
    from dlscope.capture.base import Settings
    from dlscope.capture.launcher import ProfiledRun

    marker = tmp_path / "ran"
    prog = tmp_path / "prog.py"
    prog.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    run = ProfiledRun([sys.executable, str(prog)], tmp_path / "p.dlscope", Settings(), ahead=())
    run.call_off()
    assert run.proc.returncode == 0 and not marker.exists() and not (tmp_path / "p.dlscope").exists()
    went = ProfiledRun([sys.executable, str(prog)], tmp_path / "q.dlscope", Settings(), ahead=())
    went.go()
    assert went.proc.wait(timeout=60) == 0 and marker.read_text() == "ran"
    went.finish()


def test_the_next_run_goes_on_once_the_last_has_measured_its_steps_not_at_its_exit(tmp_path, monkeypatch):
    """A run that takes 3 s to end after its last measured step (as a CUDA context's teardown does) does
    not hold its GPU's next run, started ahead, for those seconds: that one goes on at its mark."""
    exits = tmp_path / "exits.jsonl"
    monkeypatch.setenv("PROBE_SLOW_EXIT_S", "3")
    monkeypatch.setenv("PROBE_EXIT_RECORDS", str(exits))
    r, runs = _try_on_two_gpus(tmp_path, 3)
    exited = {
        rec["run"].removesuffix(".dlscope"): rec["exited"] for rec in map(json.loads, exits.read_text().splitlines())
    }
    out = json.loads(r.stdout)
    last = {o: max(x["t"] for x in recs) for o, recs in runs.items()}
    # the later of round 2's two runs, both started ahead: the first went on after the look between
    # batches, this one at the first's mark
    run = max((f"{x['label']}.{x['round']}" for x in out["runs"] if x["clock"]["waited_s"] is not None), key=last.get)
    gpu = runs[run][0]["gpus"]
    prev = max((o for o in runs if runs[o][0]["gpus"] == gpu and last[o] < last[run]), key=lambda o: last[o])
    assert last[prev] < runs[run][0]["started"] < exited[prev]  # after its steps, before its exit
    assert not list(tmp_path.glob("t.try/*.dlscope/measured"))  # the mark is not left in the profiles


def test_only_a_python_programs_runs_start_ahead(tmp_path):
    """A run starts ahead only where dlscope's bootstrap holds the process it starts: a Python program,
    not a shell script (its Python would run at once) nor a launcher of ranks run by Python."""
    from dlscope.application.try_fixes import _frameworks

    profile = tmp_path / "p.dlscope"
    profile.mkdir()
    (profile / "meta.json").write_text(
        json.dumps(
            {"format": "dlscope-profile", "format_version": 1, "frameworks": {"python": "3.11", "torch": "2.13"}}
        )
    )
    assert _frameworks(profile, [sys.executable, "train.py"]) == ("torch",)
    assert _frameworks(profile, ["bash", "train.sh"]) is None
    assert (
        _frameworks(profile, [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "t.py"]) is None
    )
    assert _frameworks(None, [sys.executable, "train.py"]) is None


def test_a_run_foreseen_for_the_next_batch_waits_through_the_look_or_is_called_off(tmp_path):
    """run_queues across batches: as each queue's last run goes on, the next batch's first run is started
    ahead and handed back waiting; the next call lets it go at once where its queue begins with it, and
    calls it off (its program never runs) where the look left that queue without runs."""
    from dlscope.capture.base import Settings
    from dlscope.capture.launcher import ProfiledRun, run_queues

    prog = tmp_path / "prog.py"
    prog.write_text("import sys, time\nopen(sys.argv[1], 'w').write(str(time.time()))\n")

    def starter(name: str):
        def start(early: bool) -> ProfiledRun:
            starts.append((name, early))
            cmd = [sys.executable, str(prog), str(tmp_path / name)]
            return ProfiledRun(cmd, tmp_path / f"{name}.p", Settings(), ahead=() if early else None)

        return start

    ended: list[str] = []
    starts: list[tuple[str, bool]] = []

    def done(q, j, run, rc, exited_ns):
        assert rc == 0
        ended.append(run.profile_dir.stem)

    kept = run_queues(
        [[starter("a0")], [starter("b0")]],
        done,
        ahead=True,
        after=lambda q: [starter(f"next{q}")(True), starter(f"then{q}")(True)],
    )
    assert sorted(kept) == [0, 1] and sorted(ended) == ["a0", "b0"]
    assert not (tmp_path / "next0").exists() and kept[0][0].proc.poll() is None  # waiting, not run
    # queue 0 begins with the two runs held for it, in order, then its own third; queue 1 has one run:
    # its first held run goes, its second is called off
    queues = [[starter("a1"), starter("a2"), starter("a3")], [starter("b1")]]
    assert run_queues(queues, done, ahead=True, held=kept) == {}
    assert [e for e in ended if e.startswith(("next0", "then0", "a"))] == ["a0", "next0", "then0", "a3"]
    # two runs waiting at once: queue 0's third was started ahead as its first held one went on
    assert ("a3", True) in starts and ("a3", False) not in starts and ("b1", False) not in starts
    assert "next1" in ended and not {"a1", "a2", "b1"} & set(ended)
    assert not (tmp_path / "then1").exists() and kept[1][1].proc.returncode == 0  # called off: never ran
    assert not (tmp_path / "then1.p").exists()
