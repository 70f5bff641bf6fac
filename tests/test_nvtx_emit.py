"""NVTX emission: phases and steps become NVTX ranges when asked, the default path keeps its
Range class, and a missing nvtx package is a recorded reason, not an error."""

from __future__ import annotations

import sys
import types

from dlscope import api
from dlscope.capture.app import range_type
from dlscope.capture.base import Settings
from dlscope.capture.nvtx_emit import NvtxEmitter
from dlscope.capture.session import Session
from dlscope.store.reader import attach, open_profile

from .conftest import FakeClock, q


class Domain:
    """Records NVTX calls in order, like a tool attached to the process would see them."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self._open: dict[int, str] = {}

    def get_event_attributes(self, message: str) -> str:
        return message

    def push_range(self, attrs: str) -> None:
        self.calls.append(("push", attrs))

    def pop_range(self) -> None:
        self.calls.append(("pop", ""))

    def start_range(self, attrs: str) -> int:
        h = len(self._open) + 1000
        self._open[h] = attrs
        self.calls.append(("start", attrs))
        return h

    def end_range(self, h: int) -> None:
        self.calls.append(("end", self._open.pop(h)))


def fake_nvtx(monkeypatch) -> Domain:
    d = Domain()
    mod = types.ModuleType("nvtx")
    mod.get_domain = lambda name=None: d  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "nvtx", mod)
    return d


def run(tmp_path, clock, nvtx: bool) -> Session:
    s = Session(
        tmp_path / "n.dlscope",
        Settings(nvtx=nvtx),
        owner="api",
        collectors=[NvtxEmitter],
        clock=clock,
        wall_clock=clock.wall,
    )
    prof = api.Profile(s)
    with prof:
        for _ in range(2):
            with prof.phase("outer"):
                clock.advance(10)
                with prof.phase("inner"):
                    clock.advance(5)
            prof.step()
    return s


def test_phases_and_steps_become_nvtx_ranges(tmp_path, monkeypatch):
    d = fake_nvtx(monkeypatch)
    clock = FakeClock()
    s = run(tmp_path, clock, nvtx=True)
    assert d.calls == [
        ("start", "step 0"),
        ("push", "outer"),
        ("push", "inner"),
        ("pop", ""),
        ("pop", ""),
        ("end", "step 0"),
        ("start", "step 1"),
        ("push", "outer"),
        ("push", "inner"),
        ("pop", ""),
        ("pop", ""),
        ("end", "step 1"),
        ("start", "step 2"),
        ("end", "step 2"),
    ]
    assert s.recorder.range_class.__name__.startswith("Nvtx")
    # dlscope's own recording is unchanged
    con = attach(open_profile(tmp_path / "n.dlscope"))
    assert q(con, "SELECT name, end_ns - start_ns FROM phases ORDER BY start_ns, depth") == [
        ("outer", 15),
        ("inner", 5),
        ("outer", 15),
        ("inner", 5),
    ]
    assert open_profile(tmp_path / "n.dlscope").meta.collectors["nvtx"].status == "ok"


def test_default_path_keeps_the_plain_range_class(tmp_path, monkeypatch):
    d = fake_nvtx(monkeypatch)
    clock = FakeClock()
    s = run(tmp_path, clock, nvtx=False)
    assert d.calls == []
    assert s.recorder.range_class is range_type(clock)
    assert open_profile(tmp_path / "n.dlscope").meta.collectors["nvtx"].status == "off"


def test_missing_nvtx_package_is_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "nvtx", None)
    clock = FakeClock()
    s = run(tmp_path, clock, nvtx=True)
    st = open_profile(tmp_path / "n.dlscope").meta.collectors["nvtx"]
    assert st.status == "unavailable" and "pip install nvtx" in st.reason
    assert "pip install nvtx" in capsys.readouterr().err
    assert s.recorder.range_class is range_type(clock)
    con = attach(open_profile(tmp_path / "n.dlscope"))
    assert q(con, "SELECT count(*) FROM phases") == [(4,)]


def test_with_the_real_nvtx_package(tmp_path):
    import pytest

    pytest.importorskip("nvtx")
    clock = FakeClock()
    s = run(tmp_path, clock, nvtx=True)
    assert s.recorder.range_class.__name__.startswith("Nvtx")
    assert open_profile(tmp_path / "n.dlscope").meta.collectors["nvtx"].status == "ok"
