"""`dlscope profile`: exit codes pass through, profiles survive crashes, SIGTERM and SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlscope.store.reader import attach, open_profile

from .conftest import q, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"


def test_exit_code_and_output_pass_through(tmp_path):
    out = tmp_path / "p.dlscope"
    r = run_dlscope("profile", "-o", out, "--", sys.executable, PROGRAMS / "exit_code.py", "3", cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    assert "program output unchanged" in r.stdout
    prof = open_profile(out)
    assert prof.meta.exit_code == 3 and prof.meta.batch_size == 4
    # failed after its steps: the run's end is recorded, and the summary is the usual one
    assert prof.meta.run_end.exit_code == 3 and prof.meta.run_end.steps_completed == 4
    assert "failed before its first step" not in r.stdout and "Steps  3 measured" in r.stdout
    con = attach(prof)
    assert q(con, "SELECT count(*) FROM steps")[0][0] == 4
    assert q(con, "SELECT count(*) FROM phases WHERE name = 'run'")[0][0] == 4
    assert not (tmp_path / "ignored.dlscope").exists()  # the API joined the CLI's recording


def test_plain_script_gets_a_profile_of_its_whole_run(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import time\ntime.sleep(0.3)\nprint('plain')\n")
    r = run_dlscope("profile", "--", script, cwd=tmp_path)  # a .py runs with this interpreter
    assert r.returncode == 0 and "plain" in r.stdout
    prof = open_profile(tmp_path / "plain.dlscope")
    assert prof.meta.end_ns - prof.meta.start_ns >= 300_000_000
    con = attach(prof)
    (d,) = q(con, "SELECT end_ns - start_ns FROM phases WHERE domain = 'process'")[0]
    assert d >= 300_000_000
    # a second run never overwrites the first
    r = run_dlscope("profile", "--", script, cwd=tmp_path)
    assert (tmp_path / "plain-1.dlscope").is_dir()


def test_exception_in_program_leaves_a_complete_profile(tmp_path):
    out = tmp_path / "r.dlscope"
    r = run_dlscope("profile", "-o", out, "--", sys.executable, PROGRAMS / "raises.py")
    assert r.returncode == 1 and "the program failed" in r.stderr
    con = attach(open_profile(out))
    assert q(con, "SELECT name FROM phases WHERE domain IS NULL") == [("doomed",)]


def _start(tmp_path: Path, out: Path) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ)
    env.pop("DLSCOPE_SESSION", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "-o",
            str(out),
            "--",
            sys.executable,
            str(PROGRAMS / "steps_forever.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
    )
    first = proc.stdout.readline()
    assert first.startswith("pid "), first + proc.stderr.read()
    return proc, int(first.split()[1])


def _wait_steps(proc: subprocess.Popen, n: int) -> int:
    last = -1
    while last < n:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        last = int(line.split()[1])
    return last


def test_sigterm_to_the_program_stops_it_cleanly_and_keeps_everything(tmp_path):
    out = tmp_path / "t.dlscope"
    proc, child = _start(tmp_path, out)
    done = _wait_steps(proc, 5)
    os.kill(child, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    prof = open_profile(out)
    assert not any("killed" in n for n in prof.meta.notes), prof.meta.notes
    n_steps = q(attach(prof), "SELECT count(*) FROM steps")[0][0]
    assert n_steps >= done + 1


def test_sigterm_to_dlscope_is_forwarded(tmp_path):
    out = tmp_path / "f.dlscope"
    proc, _ = _start(tmp_path, out)
    _wait_steps(proc, 2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert q(attach(open_profile(out)), "SELECT count(*) FROM steps")[0][0] >= 3


def test_sigkill_of_the_program_keeps_what_was_flushed(tmp_path):
    out = tmp_path / "k.dlscope"
    proc, child = _start(tmp_path, out)
    done = _wait_steps(proc, 5)
    time.sleep(1.6)  # the flusher writes about once a second
    os.kill(child, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    prof = open_profile(out)
    assert any("killed" in n for n in prof.meta.notes)
    steps = [r[0] for r in q(attach(prof), "SELECT step FROM steps ORDER BY step")]
    assert steps[: done + 1] == list(range(done + 1))


def test_sigkill_right_after_a_step_keeps_every_step_to_the_kill(tmp_path):
    """No wait for the flusher: the step ledger (written as each step ends) has the steps that
    the events spool's last flush missed; the note says how many."""
    out = tmp_path / "l.dlscope"
    proc, child = _start(tmp_path, out)
    done = _wait_steps(proc, 3)
    os.kill(child, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL
    prof = open_profile(out)
    steps = [r[0] for r in q(attach(prof), "SELECT step FROM steps ORDER BY step")]
    # every step it said it finished, and at most the one it was in when killed
    assert steps == list(range(len(steps))) and done + 1 <= len(steps) <= done + 2
    assert prof.meta.run_end.steps_completed == len(steps) and prof.meta.run_end.ranks == []


def test_sigkill_of_everything_leaves_a_spool_that_summary_finalizes(tmp_path):
    out = tmp_path / "kk.dlscope"
    proc, _ = _start(tmp_path, out)
    done = _wait_steps(proc, 4)
    time.sleep(1.6)
    os.killpg(proc.pid, signal.SIGKILL)  # dlscope and the program, as an OOM killer might
    proc.communicate(timeout=60)
    assert not (out / "meta.json").exists() and (out / "spool").is_dir()
    r = run_dlscope("summary", out, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "finalized" in r.stderr
    s = json.loads(r.stdout)
    assert s["steps"]["total_steps"] >= done + 1
    assert s["layers"]["application"]["available"] is True


def test_recording_imports_nothing_heavy_into_the_program(tmp_path):
    probe = "import sys; print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'numpy', 'duckdb', 'rich'}))"
    r = run_dlscope("profile", "-o", tmp_path / "i.dlscope", "--quiet", "--", sys.executable, "-c", probe)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_a_program_that_fails_before_its_first_step_is_summarized_by_its_error(tmp_path, cli):
    """`import` of a missing module (a venv not activated): the summary says so first, with the
    exit code and the program's last stderr line, and nothing about steps or rules."""
    out = tmp_path / "m.dlscope"
    r = run_dlscope("profile", "-o", out, "--", sys.executable, "-c", "import dlscope_no_such_module")
    error = "ModuleNotFoundError: No module named 'dlscope_no_such_module'"
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and error in r.stderr  # still passed through
    failure = f"the program failed before its first step: exit code 1: {error}"
    end = open_profile(out).meta.run_end
    assert (end.exit_code, end.signal, end.last_stderr_line, end.steps_completed) == (1, None, error, 0)
    later = cli("summary", out)
    as_json = json.loads(cli("summary", out, "--format", "json").out)
    for text in (r.stdout, later.out):
        lines = text.splitlines()
        assert lines[0].startswith("dlscope summary") and lines[1].strip() == failure
        assert not any(w in text for w in ("Steps", "step()", "rule", "Advice", "Layers")), text
    assert list(as_json)[:2] == ["profile", "failure"] and as_json["failure"] == failure
    assert as_json["run_end"] == {
        "exit_code": 1,
        "signal": None,
        "last_stderr_line": error,
        "steps_completed": 0,
        "ranks": [],
    }
    assert not {"steps", "phases", "layers", "advice"} & set(as_json)


def test_a_program_killed_before_its_first_step_says_by_which_signal(tmp_path):
    out = tmp_path / "k.dlscope"
    r = run_dlscope(
        "profile",
        "-o",
        out,
        "--",
        sys.executable,
        "-c",
        "import os, signal, sys; print('loading', file=sys.stderr); os.kill(os.getpid(), signal.SIGKILL)",
    )
    assert r.returncode == 128 + signal.SIGKILL
    assert "the program failed before its first step: killed by signal 9 (SIGKILL): loading" in r.stdout.splitlines()[1]
    assert open_profile(out).meta.run_end.signal == signal.SIGKILL


def test_the_stderr_tee_passes_everything_through_and_keeps_a_bounded_tail(tmp_path):
    """200 kB of stderr, no newline at its end, then a failure: every byte reaches our stderr in
    order, and the tail kept is at most TAIL_BYTES."""
    from dlscope.capture import launcher

    prog = (
        "import sys\nfor i in range(20000): sys.stderr.write(f'line {i:05d}\\n')\n"
        "sys.stderr.write('x' * 500 + ' the end'); sys.exit(4)"
    )
    r = run_dlscope("profile", "-o", tmp_path / "t.dlscope", "--quiet", "--", sys.executable, "-c", prog)
    assert r.returncode == 4
    assert r.stderr.startswith("".join(f"line {i:05d}\n" for i in range(20000)) + "x" * 500 + " the end")
    end = open_profile(tmp_path / "t.dlscope").meta.run_end
    assert end.last_stderr_line == "x" * (launcher.LAST_LINE_CHARS - 3) + "..."
    tail = launcher.StderrTail()
    r_fd, w_fd = os.pipe()
    tail.start(os.fdopen(r_fd, "rb"))
    os.write(w_fd, b"a\n" * 10_000 + b"last one\r\n")
    os.close(w_fd)
    tail.join()
    assert len(tail._tail) <= launcher.TAIL_BYTES and tail.last_line() == "last one"


def test_q_is_quiet(tmp_path):
    """-q, as most tools spell it: no live line, no summary; meta.json says the user turned the
    live line off."""
    r = run_dlscope("profile", "-q", "-o", tmp_path / "q.dlscope", "--", sys.executable, "-c", "print('only me')")
    assert r.returncode == 0 and r.stdout == "only me\n", r.stdout + r.stderr
    assert "dlscope: profile written to" in r.stderr
    live = open_profile(tmp_path / "q.dlscope").meta.collectors["live"]
    assert (live.status, live.reason) == ("off", "turned off by the user (--quiet)")
