"""dlscope profile's live line: on a terminal, a status line with the step, step times and phase;
never when stderr is a pipe or with --quiet; the program's own output is untouched."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from dlscope.capture.live_view import LiveView

PROGRAM = """
import time, dlscope
with dlscope.profile("ignored.dlscope") as prof:
    for i in range(60):
        with prof.phase("work"):
            time.sleep(0.05)
        prof.step()
print("program output")
"""


def _run(tmp_path: Path, tty: bool, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    script = tmp_path / "loop.py"
    script.write_text(PROGRAM)
    cmd = [
        sys.executable,
        "-m",
        "dlscope",
        "profile",
        "-o",
        str(tmp_path / "p.dlscope"),
        "-f",
        *extra,
        "--",
        sys.executable,
        str(script),
    ]
    env = {k: v for k, v in os.environ.items() if k != "DLSCOPE_SESSION"}
    if not tty:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        return p.returncode, p.stdout, p.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=tmp_path, text=True)
    os.close(slave)
    got = b""
    deadline = time.time() + 120
    while time.time() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        elif p.poll() is not None:
            break
    out = p.stdout.read() if p.stdout else ""
    p.wait(timeout=30)
    os.close(master)
    return p.returncode, out, got.decode(errors="replace")


def test_the_live_line_shows_on_a_terminal(tmp_path):
    rc, out, err = _run(tmp_path, tty=True)
    assert rc == 0, err
    lines = [seg for seg in err.split("\r\x1b[K") if seg.startswith("dlscope: step")]
    assert len(lines) >= 2, err  # refreshed about once a second over the ~3 s run
    assert any("median" in ln and "in work" in ln for ln in lines), lines
    steps = [int(ln.split()[2]) for ln in lines]
    assert steps == sorted(steps) and steps[-1] > steps[0]
    assert "program output" in out and "dlscope: step" not in out  # stdout is the program's own


def test_no_live_line_in_a_pipe_or_with_quiet(tmp_path):
    rc, out, err = _run(tmp_path, tty=False)
    assert rc == 0 and "dlscope: step" not in err and "\x1b[K" not in err
    rc, out, err = _run(tmp_path, tty=True, extra=("--quiet",))
    assert rc == 0 and "dlscope: step" not in err


def test_the_line_from_status_files(tmp_path):
    (tmp_path / "1.live.json").write_text('{"rank": 1, "step": 7, "last_ms": 12.5, "median_ms": 11.0, "phase": null}')
    (tmp_path / "2.live.json").write_text(
        '{"rank": 0, "step": 9, "last_ms": 10.0, "median_ms": 10.5, "phase": "forward"}'
    )
    assert LiveView(tmp_path).line() == "dlscope: step 9 | last 10.0 ms | median 10.5 ms | in forward | 2 ranks"
    assert LiveView(tmp_path / "none").line() == ""
