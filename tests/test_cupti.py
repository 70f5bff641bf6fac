"""The CUPTI collector on a fake CUPTI that drives dlscope's real ctypes buffer callbacks:
bulk decoding with exact counts, names, kinds and clock alignment; dropped records; the lazy
start in 'auto' mode; CUPTI arbitration; and every unavailable path."""

from __future__ import annotations

import importlib.util
import math
import os
import struct
import sys
import threading
import time
import types

import pytest

from dlscope import api
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports.phase_sum import compute as phase_sum
from dlscope.capture import cupti_activity, cupti_records, import_hooks, nvml_api
from dlscope.capture.base import Settings
from dlscope.capture.cupti import CuptiCollector
from dlscope.capture.session import Session
from dlscope.store.reader import attach, open_profile

from .conftest import q
from .fake_cupti import K_OFFSET, ActivityKind, FakeCupti, FakeLib

KERNEL_NAMES = [b"_Z6matmulPfS_S_i", b"cupy_add__float32_float32_float32", b"reduce_kernel"]


@pytest.fixture
def fake(monkeypatch):
    """The fake CUPTI installed as cupti-python and libcupti; small buffers so many complete."""
    lib = FakeLib()
    mod = FakeCupti(lib)
    pkg = types.ModuleType("cupti")
    pkg.cupti = mod  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupti", pkg)
    monkeypatch.setitem(sys.modules, "cupti.cupti", mod)
    monkeypatch.setattr(cupti_activity, "_load_libcupti", lambda: lib)
    monkeypatch.setattr(cupti_activity, "BUFFER_BYTES", 16 * 1024)
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    monkeypatch.setattr(nvml_api, "driver_missing", lambda: False)  # a fake CUPTI stands for a GPU machine
    return mod


def session(tmp_path, **settings) -> tuple[Session, api.Profile]:
    s = Session(tmp_path / "c.dlscope", Settings(**settings), owner="api", collectors=[CuptiCollector])
    return s, api.Profile(s)


def launch(lib: FakeLib, corr: int, name_ptr: int, kind=ActivityKind.RUNTIME, cbid=211, dur=4000) -> None:
    """One launch as CUPTI reports it: the API call, then the kernel it enqueued."""
    t = time.perf_counter_ns() + K_OFFSET
    lib.emit(
        kind,
        cbid=cbid,
        start=t,
        end=t + 500,
        process_id=os.getpid(),
        thread_id=threading.get_native_id(),
        correlation_id=corr,
    )
    lib.emit(
        ActivityKind.CONCURRENT_KERNEL,
        start=t + 1000,
        end=t + 1000 + dur,
        device_id=0,
        stream_id=7,
        correlation_id=corr,
        grid_x=64,
        grid_y=2,
        grid_z=1,
        block_x=256,
        block_y=1,
        block_z=1,
        registers_per_thread=40,
        static_shared_memory=1024,
        dynamic_shared_memory=2048,
        name=name_ptr,
    )


def test_records_decode_exactly(tmp_path, fake):
    lib = fake.lib
    names = [__import__("ctypes").create_string_buffer(n) for n in KERNEL_NAMES]
    ptr = [__import__("ctypes").addressof(b) for b in names]
    s, prof = session(tmp_path, cupti="on")
    prof.start()
    assert s.cupti_owner == "cupti"
    n_per_step, steps = 700, 4
    corr = 0
    for _ in range(steps):
        with prof.phase("launch"):
            for _ in range(n_per_step):
                corr += 1
                launch(lib, corr, ptr[corr % 3])
        s.flush()
        prof.step()
    with prof.phase("copy"):
        t = time.perf_counter_ns() + K_OFFSET
        tid = threading.get_native_id()
        lib.emit(
            ActivityKind.RUNTIME,
            cbid=41,
            start=t,
            end=t + 900,
            process_id=os.getpid(),
            thread_id=tid,
            correlation_id=900001,
        )
        lib.emit(
            ActivityKind.MEMCPY,
            copy_kind=1,
            src_kind=1,
            dst_kind=3,
            bytes=1 << 20,
            start=t + 100,
            end=t + 800,
            device_id=0,
            stream_id=7,
            correlation_id=900001,
        )
        lib.emit(
            ActivityKind.MEMSET,
            bytes=4096,
            memory_kind=3,
            start=t + 850,
            end=t + 860,
            device_id=0,
            stream_id=7,
            correlation_id=900002,
        )
        lib.emit(ActivityKind.SYNCHRONIZATION, type=3, start=t + 870, end=t + 990, correlation_id=900001, stream_id=7)
        launch(lib, 900003, ptr[0], kind=ActivityKind.DRIVER, cbid=307)
    prof.stop()
    assert s.cupti_owner is None  # released at stop
    assert fake.api_off == {("runtime", 17), ("driver", 303)}  # state getters are not traced
    assert lib.completed > 20  # many buffers went through the pool

    meta = open_profile(tmp_path / "c.dlscope").meta
    st = meta.collectors["cupti"]
    assert st.status == "ok" and st.settings["started_by"] == "cupti='on'"
    assert st.settings["records"]["CONCURRENT_KERNEL"] == n_per_step * steps + 1
    # sizes were measured with CUPTI's own walk, once per new kind, not once per buffer
    assert st.settings["record_bytes"] == {
        "CONCURRENT_KERNEL": 232,
        "RUNTIME": 40,
        "DRIVER": 40,
        "MEMCPY": 96,
        "MEMSET": 88,
        "SYNCHRONIZATION": 56,
    }
    assert lib.next_record_calls < 3 * cupti_activity.BUFFER_BYTES // 40
    assert not (tmp_path / "c.dlscope" / "spool").exists()
    con = attach(open_profile(tmp_path / "c.dlscope"))
    assert q(con, "SELECT count(*) FROM kernels")[0][0] == n_per_step * steps + 1
    by_name = dict(q(con, "SELECT name, count(*) FROM kernels GROUP BY 1"))
    expect = {n.decode(): 0 for n in KERNEL_NAMES}
    for c in range(1, corr + 1):
        expect[KERNEL_NAMES[c % 3].decode()] += 1
    expect[KERNEL_NAMES[0].decode()] += 1  # the driver-API launch
    assert by_name == expect
    k = q(
        con,
        """SELECT grid_x, grid_y, block_x, registers, shared_bytes, static_shared_bytes, stream, device
                  FROM kernels LIMIT 1""",
    )[0]
    assert k == (64, 2, 256, 40, 3072, 1024, 7, 0)
    # the API call and its kernel are 1000 ns apart on the fake CUPTI clock, and stay so
    assert q(con, """SELECT DISTINCT k.start_ns - a.start_ns FROM kernels k JOIN api a USING (correlation_id)""") == [
        (1000,)
    ]
    # CUPTI times land on the profile's clock: every kernel starts inside the phase that launched it
    outside = q(
        con,
        """SELECT count(*) FROM kernels k JOIN api a USING (correlation_id)
                        WHERE NOT EXISTS (SELECT 1 FROM phases p WHERE a.start_ns >= p.start_ns
                            AND k.start_ns <= p.end_ns)""",
    )
    assert outside[0][0] == 0
    api_names = dict(q(con, "SELECT name, any_value(kind) FROM api GROUP BY 1"))
    assert api_names == {"cudaLaunchKernel": "runtime", "cudaMemcpyAsync": "runtime", "cuLaunchKernel": "driver"}
    assert q(con, "SELECT copy_kind, src_kind, dst_kind, bytes FROM memcpy") == [
        ("HtoD", "pageable", "device", 1 << 20)
    ]
    assert q(con, "SELECT mem_kind, bytes FROM memset") == [("device", 4096)]
    assert q(con, "SELECT kind, tid FROM sync") == [("stream", tid)]
    # GPU work takes the step of the API call that launched it
    assert q(
        con, "SELECT count(*) FROM kernels k JOIN api a USING (correlation_id) WHERE k.step IS DISTINCT FROM a.step"
    ) == [(0,)]
    # every step ran under CUPTI: all are flagged traced, and the phase breakdown's GPU columns
    # (per traced step) count the kernels each 'launch' phase launched
    assert q(con, "SELECT bool_and(traced) FROM steps") == [(True,)]
    assert q(con, "SELECT count(*) FROM phases WHERE domain = 'trace'") == [(1,)]
    data = ProfileData.open(tmp_path / "c.dlscope")
    rows = {r["name"]: r for r in phase_sum(data).table.to_pylist()}
    assert rows["launch"]["kernels"] == n_per_step and "CUPTI tracing" not in rows


def test_dropped_records_are_counted(tmp_path, fake, monkeypatch):
    gate = threading.Event()
    orig = cupti_activity.ActivityTracer._process

    def slow(self, buf, valid):
        gate.wait(10)
        return orig(self, buf, valid)

    monkeypatch.setattr(cupti_activity.ActivityTracer, "_process", slow)
    monkeypatch.setattr(cupti_activity, "MAX_HELD_BYTES", 2 * cupti_activity.BUFFER_BYTES)
    lib = fake.lib
    s, prof = session(tmp_path, cupti="on")
    prof.start()
    ptr = __import__("ctypes").addressof(name := __import__("ctypes").create_string_buffer(b"k"))
    emitted = 600
    for i in range(emitted // 2):
        launch(lib, i + 1, ptr)
    gate.set()
    prof.stop()
    del name
    meta = open_profile(tmp_path / "c.dlscope").meta
    con = attach(open_profile(tmp_path / "c.dlscope"))
    kept = q(con, "SELECT (SELECT count(*) FROM kernels) + (SELECT count(*) FROM api)")[0][0]
    assert meta.dropped["cupti"] > 0
    assert kept + meta.dropped["cupti"] == emitted  # nothing lost without being counted


def make_package(tmp_path, name: str) -> None:
    d = tmp_path / "pkgs" / name
    d.mkdir(parents=True)
    (d / "__init__.py").write_text("IMPORTED = True\n")


@pytest.fixture
def fake_framework(tmp_path, monkeypatch):
    """An importable package named 'cupy' (a stand-in for the real one)."""
    make_package(tmp_path, "cupy")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    yield
    sys.modules.pop("cupy", None)


def test_auto_starts_when_a_cuda_framework_is_imported(tmp_path, fake, fake_framework):
    s, prof = session(tmp_path, cupti="auto", torch="off")
    prof.start()
    col = s.collectors[0]
    assert col.state == "waiting" and fake.lib.req is None  # nothing registered with CUPTI yet
    assert importlib.util.find_spec("cupy") is not None  # a probe is not an import
    assert col.state == "waiting"
    import cupy  # noqa: F401

    assert col.state == "tracing" and fake.lib.req is not None and s.cupti_owner == "cupti"
    ptr = __import__("ctypes").addressof(name := __import__("ctypes").create_string_buffer(b"k"))
    launch(fake.lib, 1, ptr)
    prof.stop()
    del name
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "ok" and st.settings["started_by"] == "import cupy"
    assert q(attach(open_profile(tmp_path / "c.dlscope")), "SELECT count(*) FROM kernels") == [(1,)]


def test_auto_leaves_cupti_to_torch(tmp_path, fake, fake_framework, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or types.ModuleType("torch"))
    s, prof = session(tmp_path, cupti="auto")
    prof.start()
    import cupy  # noqa: F401

    assert s.collectors[0].state == "skipped" and fake.lib.req is None
    prof.stop()
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "off" and "torch" in st.reason


def test_auto_with_no_cuda_framework(tmp_path, fake):
    s, prof = session(tmp_path, cupti="auto", torch="off")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "off" and "imported no CUDA framework" in st.reason
    assert fake.lib.req is None


def test_auto_on_a_machine_without_gpu_says_so(tmp_path, monkeypatch):
    """No NVIDIA driver: the reason is the missing GPU, not the auto mode's wait for a framework."""
    monkeypatch.setattr(nvml_api, "driver_missing", lambda: True)
    s, prof = session(tmp_path, cupti="auto", torch="off")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert (st.status, st.reason) == ("unavailable", "no NVIDIA GPU on this machine")


def test_claimed_cupti_is_not_taken(tmp_path, fake):
    s, prof = session(tmp_path, cupti="on")
    assert s.claim_cupti("torch")
    try:
        with prof:
            pass
    finally:
        s.release_cupti("torch")
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable" and st.reason == "CUPTI is already used in this process by torch"
    assert fake.lib.req is None


@pytest.mark.parametrize(
    "path, tool",
    [
        ("/opt/nvidia/nsight-systems/2025.3.2/target-linux-x64/libToolsInjection64.so", "Nsight Systems"),
        (
            "/usr/local/cuda/nsight-compute-2025.1/target/linux-desktop-glibc_2_11_3-x64/libInterceptorInjectionTarget.so",
            "Nsight Compute",
        ),
        ("/usr/local/cuda/compute-sanitizer/libsanitizer-collection.so", "compute-sanitizer"),
    ],
)
def test_injected_tool_holds_cupti(tmp_path, fake, monkeypatch, path, tool, cli):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", path)
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable" and tool in st.reason
    assert s.cupti_owner is None and fake.lib.req is None
    r = cli("summary", tmp_path / "c.dlscope")
    assert r.code == 0 and tool in r.out


def test_another_subscriber_holds_cupti(tmp_path, fake):
    fake.other_client = True
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable" and "another CUPTI client" in st.reason
    assert fake.enabled == set() and fake.lib.req is None


def test_no_cupti_python(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "cupti", None)  # import fails as if not installed
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable" and st.reason == "cupti-python is not installed (pip install cupti-python)"


def test_real_cupti_python_without_a_driver(tmp_path, monkeypatch):
    if importlib.util.find_spec("cupti") is None:
        pytest.skip("cupti-python is not installed")
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this machine has an NVIDIA driver")
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable" and "driver" in st.reason.lower()


def test_torn_spool_keeps_whole_records(tmp_path, fake):
    lib = fake.lib
    ptr = __import__("ctypes").addressof(name := __import__("ctypes").create_string_buffer(b"k"))
    s, prof = session(tmp_path, cupti="on")
    prof.start()
    for i in range(200):
        launch(lib, i + 1, ptr)
    s.stop()
    del name
    spool = tmp_path / "c.dlscope" / "spool" / f"{s.pid}.cupti.spool"
    blocks, torn = cupti_records.read_blocks(spool)
    full = sum(len(b) // size for items in blocks.values() for size, b in items)
    assert not torn and full == 400
    data = spool.read_bytes()
    pos, last_size = 8, 0
    while pos < len(data):  # find the record size of the last block, independently
        _, last_size, n, _ = struct.unpack_from("<4q", data, pos)
        pos += 32 + n * last_size
    spool.write_bytes(data[:-100])  # killed in the middle of a write
    blocks, torn = cupti_records.read_blocks(spool)
    assert torn and sum(len(b) // size for items in blocks.values() for size, b in items) == 400 - math.ceil(
        100 / last_size
    )
    from dlscope.capture.finalize import finalize_profile

    finalize_profile(tmp_path / "c.dlscope")
    meta = open_profile(tmp_path / "c.dlscope").meta
    assert any("CUPTI spool ended inside a write" in n for n in meta.notes)


def test_import_hook_fires_after_import_once(tmp_path, monkeypatch):
    make_package(tmp_path, "dlscope_fw_probe")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    seen: list[tuple[str, bool]] = []

    def cb(mod):
        seen.append((mod.__name__, sys.modules[mod.__name__].IMPORTED))

    import_hooks.when_imported("dlscope_fw_probe", cb)
    try:
        assert importlib.util.find_spec("dlscope_fw_probe") is not None
        assert seen == []  # a probe is not an import
        import dlscope_fw_probe

        assert seen == [("dlscope_fw_probe", True)]
        assert dlscope_fw_probe.__spec__.loader.is_package("dlscope_fw_probe")  # delegated
        importlib.reload(dlscope_fw_probe)
        import json  # noqa: F401  - other imports pass through untouched

        assert len(seen) == 1  # once
        assert import_hooks._finder not in sys.meta_path  # nothing left watching
    finally:
        import_hooks.cancel("dlscope_fw_probe", cb)
        sys.modules.pop("dlscope_fw_probe", None)


@pytest.mark.parametrize("refused, status", [("SYNCHRONIZATION", "ok"), ("CONCURRENT_KERNEL", "unavailable")])
def test_a_kind_cupti_refuses(tmp_path, fake, monkeypatch, refused, status):
    from .fake_cupti import ActivityKind, cuptiError

    orig = fake.activity_enable

    def enable(kind):
        if kind == ActivityKind[refused]:
            raise cuptiError(1)
        orig(kind)

    monkeypatch.setattr(fake, "activity_enable", enable)
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    meta = open_profile(tmp_path / "c.dlscope").meta
    assert meta.collectors["cupti"].status == status
    if status == "ok":  # an optional kind is left out and the profile says so
        assert any("SYNCHRONIZATION records not available" in n for n in meta.notes)
    else:
        assert "CUPTI error" in meta.collectors["cupti"].reason and fake.enabled == set()


def _fake_cupti_package(root, body):
    """A 'cupti' package whose cupti.cupti module runs ``body`` at import (as cupti-python's
    compiled module imports cuda.bindings at init)."""
    pkg = root / "cupti"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cupti.py").write_text(body)


def _forget_cupti(monkeypatch):
    for name in [m for m in sys.modules if m == "cupti" or m.startswith("cupti.")]:
        monkeypatch.delitem(sys.modules, name)


def test_cupti_python_missing_its_dependency_is_not_called_not_installed(tmp_path, monkeypatch):
    # what a --no-deps install of cupti-python does: its module imports cuda.bindings, absent here
    _fake_cupti_package(tmp_path, "import dlscope_test_absent_cuda_bindings.driver\n")
    _forget_cupti(monkeypatch)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    s, prof = session(tmp_path, cupti="on")
    with prof:
        pass
    st = open_profile(tmp_path / "c.dlscope").meta.collectors["cupti"]
    assert st.status == "unavailable"
    assert "not installed" not in st.reason and "'dlscope_test_absent_cuda_bindings'" in st.reason
    assert "\n" not in st.reason


def test_cupti_import_failure_reasons():
    from dlscope.capture.cupti_lib import import_failure

    def failure(stmt):
        try:
            exec(stmt)
        except Exception as e:
            return import_failure(e)
        raise AssertionError("no failure")

    assert failure("raise ModuleNotFoundError('x', name='cupti')").startswith("cupti-python is not installed")
    assert "does not load on Python" in failure("raise ModuleNotFoundError('x', name='cupti.cupti')")
    msg = failure("raise OSError('libcupti.so.13: cannot open shared object file\\nmore')")
    assert msg == "cupti-python could not be imported: OSError: libcupti.so.13: cannot open shared object file"


def test_libcupti_candidates_from_wheels_and_toolkits(tmp_path):
    from dlscope.capture.cupti_lib import candidates

    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    old_wheel = tmp_path / "site" / "nvidia" / "cuda_cupti" / "lib"
    toolkit = tmp_path / "cuda" / "extras" / "CUPTI" / "lib64"
    for d, so in ((wheel, "libcupti.so.13"), (old_wheel, "libcupti.so.12"), (toolkit, "libcupti.so.13")):
        d.mkdir(parents=True)
        (d / so).write_bytes(b"")
    found = candidates(
        [str(tmp_path / "nothing"), str(tmp_path / "site")], {"CUDA_HOME": str(tmp_path / "cuda")}, roots=()
    )
    # .so.13 before .so.12; a wheel on the path before a toolkit
    assert found == [wheel / "libcupti.so.13", toolkit / "libcupti.so.13", old_wheel / "libcupti.so.12"]
