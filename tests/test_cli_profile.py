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
    proc = subprocess.Popen([sys.executable, "-m", "dlscope", "profile", "-o", str(out), "--", sys.executable,
                             str(PROGRAMS / "steps_forever.py")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path, start_new_session=True)
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
