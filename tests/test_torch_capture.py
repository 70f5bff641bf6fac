"""The PyTorch layer on the CPU: an unmodified script gets steps, ops and derived phases; clocks
align with dlscope's; the program's output is unchanged; windows and 'off' work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize

from .conftest import q, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"


def profile(tmp_path: Path, *args: str, script: str = "unmodified_train.py", script_args: tuple[str, ...] = ()):
    out = tmp_path / "p.dlscope"
    r = run_dlscope(
        "profile", "-o", out, "--quiet", *args, "--", sys.executable, PROGRAMS / script, *script_args, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    return r, ProfileData.open(out)


def test_unmodified_script_gets_steps_ops_and_derived_phases(tmp_path):
    r, data = profile(tmp_path, script_args=("6",))
    assert q(data.con, "SELECT count(*), min(source) FROM steps") == [(6, "optimizer")]
    assert data.count("ops") > 100
    names = {p.name for p in summarize(data).phases}
    assert {"dataloader", "forward", "backward", "optimizer"} <= names
    # each step ends inside an optimizer step (the post-hook runs within PyTorch's annotation)
    inside = q(
        data.con,
        """SELECT count(DISTINCT s.step) FROM steps s JOIN phases p
                            ON p.name = 'Optimizer.step#SGD.step' AND p.start_ns <= s.end_ns
                                AND s.end_ns <= p.end_ns""",
    )
    assert inside == [(6,)]
    # forward comes before backward in every step
    bad = q(
        data.con,
        """SELECT count(*) FROM phases f JOIN phases b ON f.step = b.step
                         WHERE f.name = 'forward' AND b.name = 'backward' AND f.end_ns > b.start_ns""",
    )
    assert bad == [(0,)]
    assert data.meta.collectors["torch"].status == "ok"


def test_program_output_is_unchanged(tmp_path):
    plain = subprocess.run([sys.executable, PROGRAMS / "unmodified_train.py", "3"], capture_output=True, text=True)
    r, _ = profile(tmp_path, script_args=("3",))
    assert r.stdout == plain.stdout
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("dlscope:")] == plain.stderr.splitlines()


def test_torch_ops_lie_inside_the_dlscope_phase_around_them(tmp_path):
    _, data = profile(tmp_path, script="phase_around_op.py")
    rows = q(
        data.con,
        """SELECT count(*) FROM ops o JOIN phases p ON p.name = 'matmul_phase' AND p.step = o.step
                          WHERE o.name = 'aten::mm' AND o.start_ns >= p.start_ns AND o.end_ns <= p.end_ns""",
    )
    assert rows == [(3,)]


def test_step_window_limits_the_torch_layer(tmp_path):
    _, data = profile(tmp_path, "--steps", "3:4", script_args=("8",))
    assert [r[0] for r in q(data.con, "SELECT step FROM steps ORDER BY step")] == [3, 4]
    # ops exist only from the start of step 3 to the end of step 4
    lo, hi = q(data.con, "SELECT min(start_ns), max(end_ns) FROM steps")[0]
    assert q(data.con, f"SELECT count(*) FROM ops WHERE start_ns < {lo} OR start_ns > {hi}") == [(0,)]
    assert data.count("ops") > 0


def test_torch_off_and_no_torch_say_why(tmp_path):
    _, data = profile(tmp_path, "--torch", "off", script_args=("2",))
    assert data.count("ops") == 0
    assert "turned off" in summarize(data).layers["framework"].reason
    (tmp_path / "b").mkdir()
    _, data = profile(tmp_path / "b", script="no_torch.py")
    assert "never imported torch" in summarize(data).layers["framework"].reason


def test_default_mode_traces_a_window_and_times_the_rest_untraced(tmp_path):
    _, data = profile(tmp_path, script_args=("14",))
    traced = [r[0] for r in q(data.con, "SELECT step FROM steps WHERE traced ORDER BY step")]
    # warm-up step 0 and 5 detail steps, plus the step in which tracing stopped
    assert traced[:6] == [0, 1, 2, 3, 4, 5] and len(traced) <= 7
    last_traced_end = q(data.con, "SELECT max(end_ns) FROM phases WHERE domain = 'trace'")[0][0]
    assert q(data.con, f"SELECT count(*) FROM ops WHERE start_ns > {last_traced_end}") == [(0,)]
    s = summarize(data)
    assert s.steps.traced_excluded == [t for t in traced if t >= 1]
    assert s.steps.count == 13 - len(s.steps.traced_excluded)
    untraced = q(data.con, "SELECT list(end_ns - start_ns ORDER BY step) FROM steps WHERE NOT traced AND NOT warmup")[
        0
    ][0]
    import numpy as np

    assert s.steps.mean_ms == __import__("pytest").approx(np.mean(untraced) / 1e6)


def test_full_mode_and_no_detail(tmp_path):
    _, data = profile(tmp_path, "--mode", "full", script_args=("8",))
    assert q(data.con, "SELECT bool_and(traced) FROM steps") == [(True,)], (data.meta.notes, data.meta.collectors)
    assert q(data.con, "SELECT count(*) FROM ops WHERE input_shapes IS NOT NULL")[0][0] > 0
    (tmp_path / "z").mkdir()
    _, data = profile(tmp_path / "z", "--detail-steps", "0", script_args=("4",))
    assert data.count("ops") == 0 and data.count("steps") == 4
    assert "detail" in summarize(data).layers["framework"].reason


def test_traced_window_survives_sigkill_after_it_closed(tmp_path):
    """The default window (warm-up step 0 and steps 1-5) is written when it closes: a SIGKILL
    many steps later keeps its ops, and the steps run up to the last flush."""
    out = tmp_path / "k.dlscope"
    env = {k: v for k, v in os.environ.items() if k != "DLSCOPE_SESSION"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "-o",
            str(out),
            "--quiet",
            "--",
            sys.executable,
            str(PROGRAMS / "torch_until_killed.py"),
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
    while True:  # well past the window
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        if int(line.split()[1]) >= 40:
            break
    time.sleep(1.6)  # one flush of the application layer
    os.kill(int(first.split()[1]), signal.SIGKILL)
    proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGKILL
    data = ProfileData.open(out)
    assert any("killed" in n for n in data.meta.notes)
    # every step of the window has its forward pass: two Linear layers, so two addmm per step
    per_step = dict(q(data.con, "SELECT step, count(*) FROM ops WHERE name = 'aten::addmm' GROUP BY 1"))
    assert all(per_step.get(s) == 2 for s in range(1, 6)), per_step
    assert q(data.con, "SELECT count(*) FROM steps")[0][0] >= 40
    traced = [r[0] for r in q(data.con, "SELECT step FROM steps WHERE traced ORDER BY step")]
    assert traced[:6] == [0, 1, 2, 3, 4, 5] and len(traced) <= 7
