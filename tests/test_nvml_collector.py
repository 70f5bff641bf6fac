"""The NVML collector end to end: samples aligned to phases and steps (fake clock), the thread
and helper-process modes (fake NVML on the real clock), a killed program, and the unavailable
paths as meta.json, `dlscope summary` and `dlscope stats --report gpu_metrics` show them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dlscope import api
from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize
from dlscope.capture import counter_spool
from dlscope.capture.base import Settings
from dlscope.capture.finalize import finalize_profile
from dlscope.capture.nvml import NvmlCollector
from dlscope.capture.nvml_sampler import close_sampler, open_sampler
from dlscope.capture.session import Session
from dlscope.store.reader import attach, open_profile

from .conftest import EPOCH0, REPO, FakeClock, assert_one_line_error, q, run_dlscope
from .fake_nvml import FakeGpu, FakeNvml

MS = 1_000_000
FAKE = "dlscope_fake_nvml"


@pytest.fixture
def fake_module(monkeypatch):
    """Register a fake NVML under an importable name; returns a function to set it."""

    def install(fake: FakeNvml) -> FakeNvml:
        monkeypatch.setitem(sys.modules, FAKE, fake)
        return fake

    return install


def run_steps(tmp_path, fake_module, n_steps=6, pre_ms=300, run_ms=500):
    """A program alternating a CPU 'preprocess' and a GPU 'run' phase on a fake clock, sampled by
    a fake GPU that is busy exactly during 'run'. Returns the profile path."""
    clock = FakeClock(10**9)
    session = Session(
        tmp_path / "p.dlscope", Settings(), owner="api", collectors=[], clock=clock, wall_clock=clock.wall
    )
    prof = api.Profile(session)
    prof.start()
    gpu = FakeGpu()
    fake_module(FakeNvml(clock, [gpu]))
    sampler = open_sampler(session.spool_dir, session.pid, nvml_module=FAKE, clock=clock, env={})

    def spend(ms):
        for _ in range(ms // 10):
            sampler.tick()
            clock.advance(10 * MS)

    for _ in range(n_steps):
        with prof.phase("preprocess"):
            spend(pre_ms)
        gpu.segments.append(
            (
                clock.t,
                clock.t + run_ms * MS,
                {"sm_active": 85.0, "tensor_active": 60.0, "gpu_util": 99.0, "pcie_rx": 1e8},
            )
        )
        with prof.phase("run"):
            spend(run_ms)
        prof.step()
    close_sampler(session.spool_dir, session.pid, sampler, 0.0, 1.0)
    prof.stop()
    return tmp_path / "p.dlscope"


def test_samples_align_to_phases_and_steps(tmp_path, fake_module):
    path = run_steps(tmp_path, fake_module)
    con = attach(open_profile(path))
    # the counters are on the profile's clock: the fake wall clock is EPOCH0 + monotonic
    first = q(con, "SELECT min(ts_ns) FROM counters WHERE metric = 'gpu_util'")[0][0]
    start = q(con, "SELECT min(start_ns) FROM phases")[0][0]
    assert first == start == EPOCH0 + 10**9
    # every sample got the step whose interval holds it
    bad = q(
        con,
        """SELECT count(*) FROM counters c JOIN steps s ON c.step = s.step
                    WHERE c.ts_ns < s.start_ns OR c.ts_ns >= s.end_ns""",
    )[0][0]
    assert bad == 0

    data = ProfileData.open(path)
    res = REPORTS["gpu_metrics"].compute(data)
    rows = res.table.to_pylist()
    got = {(r["scope"], r["name"], r["metric"]): r for r in rows}
    # independent computation: numpy over the raw tables, warm-up step 0 excluded
    ph = q(con, "SELECT name, start_ns, end_ns, step FROM phases WHERE kind = 'range' AND step >= 1")
    c = q(con, "SELECT ts_ns, metric, value FROM counters")
    ts = np.array([r[0] for r in c])
    for name in ("preprocess", "run"):
        inside = np.zeros(len(c), bool)
        for n, s, e, _ in ph:
            if n == name:
                inside |= (ts >= s) & (ts < e)
        for metric in ("sm_active", "tensor_active", "gpu_util", "power"):
            vals = np.array([v for (t, m, v), hit in zip(c, inside) if hit and m == metric])
            r = got[("phase", name, metric)]
            assert r["samples"] == len(vals) and r["mean"] == pytest.approx(vals.mean()) and r["max"] == vals.max()
    # what the acceptance run checks on a real GPU: busy in 'run', idle in 'preprocess'
    assert got[("phase", "run", "sm_active")]["mean"] > 70 and got[("phase", "preprocess", "sm_active")]["mean"] < 15
    assert got[("phase", "run", "tensor_active")]["mean"] > 45
    assert got[("phase", "preprocess", "gpu_util")]["max"] == 3.0
    # per step: the samples inside each selected step
    steps = q(con, "SELECT step, start_ns, end_ns FROM steps WHERE NOT warmup ORDER BY step")
    for step, s, e in steps:
        vals = [v for t, m, v in c if m == "gpu_util" and s <= t < e]
        r = got[("step", str(step), "gpu_util")]
        assert r["samples"] == len(vals) and r["mean"] == pytest.approx(np.mean(vals))
    assert ("step", "0", "gpu_util") not in got  # warm-up
    assert got[("steps", "selected steps", "power")]["unit"] == "W"
    assert not any("not available" in n for n in res.notes)

    # the summary's headline is the mean over the selected steps
    s = summarize(data)
    g = s.gpu[0]
    sel = [v for t, m, v in c if m == "sm_active" and any(a <= t < b for _, a, b in steps)]
    assert g["sm_active"] == pytest.approx(np.mean(sel)) and g["name"] == "NVIDIA H100 80GB HBM3"
    assert g["mem_used"] == 8e9 and s.unavailable == []


def test_short_phases_are_flagged(tmp_path, fake_module):
    path = run_steps(tmp_path, fake_module, n_steps=4, pre_ms=40, run_ms=500)
    res = REPORTS["gpu_metrics"].compute(ProfileData.open(path))
    assert any("preprocess" in n and "GPM window" in n for n in res.notes)
    assert not any("run (" in n for n in res.notes)


def test_thread_mode_in_the_dlscope_parent(tmp_path, fake_module):
    fake_module(FakeNvml(time.perf_counter_ns, [FakeGpu(gpm=False, name="Tesla T4", cc=(7, 5))]))
    session = Session(
        tmp_path / "t.dlscope", Settings(nvml_module=FAKE), owner="cli-parent", collectors=[NvmlCollector]
    )
    session.start()
    time.sleep(0.4)
    session.stop()
    finalize_profile(tmp_path / "t.dlscope")
    data = ProfileData.open(tmp_path / "t.dlscope")
    st = data.meta.collectors["nvml"]
    assert st.status == "ok" and st.settings["mode"] == "thread" and st.settings["samples"] > 0
    assert st.settings["sampler_cpu_pct_of_core"] >= 0
    assert data.meta.devices[0]["name"] == "Tesla T4" and data.meta.devices[0]["sms"] == 132
    n = data.scalar("SELECT count(*) FROM counters WHERE metric = 'gpu_util'")
    assert n >= 1 and n == st.settings["samples"] / 8  # every cheap reading gives 8 metrics (GPM off)
    lo, hi = data.meta.start_ns, data.meta.end_ns
    assert data.scalar(f"SELECT count(*) FROM counters WHERE ts_ns < {lo} OR ts_ns > {hi}") == 0
    s = summarize(data)
    assert any(line.startswith("nvml: sm_active") and "Tesla T4" in line for line in s.unavailable)
    res = REPORTS["gpu_metrics"].compute(data)
    assert any(n.startswith("not available: sm_active") and "Tesla T4" in n for n in res.notes)


def test_helper_process_under_the_api(tmp_path):
    settings = Settings(nvml_module="tests.fake_nvml")
    session = Session(tmp_path / "a.dlscope", settings, owner="api", collectors=[NvmlCollector])
    session.start()
    helper = session.collectors[0]._proc
    assert helper is not None and helper.pid != os.getpid()
    spool = counter_spool.spool_path(session.spool_dir, session.pid)
    deadline = time.monotonic() + 30  # the helper's start-up time depends on the machine's load
    while time.monotonic() < deadline and (not spool.exists() or spool.stat().st_size < 8 + 24 * 100):
        time.sleep(0.1)
    session.stop()
    assert helper.poll() is not None  # stopped when told
    finalize_profile(tmp_path / "a.dlscope")
    data = ProfileData.open(tmp_path / "a.dlscope")
    st = data.meta.collectors["nvml"]
    assert st.status == "ok" and st.settings["mode"] == "process"
    n = data.scalar("SELECT count(*) FROM counters WHERE metric = 'sm_active'")
    assert n >= 1  # GPM pairs, one every 100 ms once the helper runs
    lo, hi = data.meta.start_ns, data.meta.end_ns
    assert data.scalar(f"SELECT count(*) FROM counters WHERE ts_ns < {lo} OR ts_ns > {hi}") == 0


PROGRAM = """
import sys, time
from dlscope.capture.base import Settings
from dlscope.capture.nvml import NvmlCollector
from dlscope.capture.session import Session
s = Session(sys.argv[1], Settings(nvml_module="tests.fake_nvml"), owner="api", collectors=[NvmlCollector])
s.start()
print("ready", flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc")
def test_killed_program_keeps_samples_and_the_helper_stops(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    out = tmp_path / "k.dlscope"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("DLSCOPE_SESSION", None)
    p = subprocess.Popen([sys.executable, str(prog), str(out)], stdout=subprocess.PIPE, env=env, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == b"ready"
    header = counter_spool.header_path(out / "spool", p.pid)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (header.exists() and json.loads(header.read_text()).get("sampler_pid")):
        time.sleep(0.1)
    helper = json.loads(header.read_text())["sampler_pid"]
    time.sleep(1.5)  # at least one flush
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 10
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), "the sampler outlived the program"
    r = run_dlscope("sql", out, "select count(*) AS n from counters where metric = 'gpu_util'", "--format", "csv")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.strip().splitlines()[-1]) >= 10


def test_nvml_unavailable_is_recorded_and_shown(tmp_path, fake_module, cli):
    fake_module(FakeNvml(time.perf_counter_ns, init_error=9))
    session = Session(tmp_path / "u.dlscope", Settings(nvml_module=FAKE), owner="api", collectors=[NvmlCollector])
    # thread mode is what the dlscope parent uses; the api's helper would report the same
    session.owner = "cli-parent"
    session.start()
    session.stop()
    session.owner = "api"
    finalize_profile(tmp_path / "u.dlscope")
    meta = open_profile(tmp_path / "u.dlscope").meta
    st = meta.collectors["nvml"]
    assert st.status == "unavailable" and st.reason == "NVML could not start: Driver Not Loaded"
    r = cli("summary", tmp_path / "u.dlscope")
    assert r.code == 0 and "NVML could not start: Driver Not Loaded" in r.out
    r = cli("stats", tmp_path / "u.dlscope", "--report", "gpu_metrics")
    assert r.code == 2
    assert_one_line_error(r.err)
    assert "Driver Not Loaded" in r.err


def test_helper_reports_unavailable_nvml(tmp_path):
    settings = Settings(nvml_module="dlscope_no_such_module")
    session = Session(tmp_path / "h.dlscope", settings, owner="api", collectors=[NvmlCollector])
    session.start()
    session.stop()
    finalize_profile(tmp_path / "h.dlscope")
    st = open_profile(tmp_path / "h.dlscope").meta.collectors["nvml"]
    assert st.status == "unavailable" and "nvidia-ml-py is not installed" in st.reason


def test_no_driver_here_is_a_reason_not_an_error(tmp_path):
    """On a machine without an NVIDIA driver the default settings say so (skipped on GPU hosts)."""
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    with api.profile(tmp_path / "c.dlscope") as prof, prof.phase("x"):
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["nvml"]
    assert st.status == "unavailable" and "no NVIDIA driver" in st.reason
