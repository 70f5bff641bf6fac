"""The application-layer recorder, driven by a fake clock: nesting, threads, marks, steps,
warm-up and windows, read back through finalize and the store."""

from __future__ import annotations

import threading

import pytest

import dlscope
from dlscope import api
from dlscope.capture.base import Settings
from dlscope.capture.finalize import finalize_profile
from dlscope.capture.session import Session
from dlscope.store.reader import attach, open_profile

from .conftest import EPOCH0, FakeClock, q


def record(tmp_path, clock: FakeClock, body, **settings) -> tuple:
    """Run ``body(prof, clock)`` in a session on the fake clock; return (meta, connection)."""
    session = Session(
        tmp_path / "p.dlscope", Settings(**settings), owner="api", collectors=[], clock=clock, wall_clock=clock.wall
    )
    prof = api.Profile(session)
    prof.start()
    try:
        body(prof, clock)
    finally:
        prof.stop()
    stored = open_profile(tmp_path / "p.dlscope")
    return stored.meta, attach(stored)


def test_nested_phases_and_begin_end_have_exact_times(tmp_path, fake_clock):
    t0 = fake_clock.t

    def body(prof, c):
        with prof.phase("outer"):
            c.advance(100)
            with prof.phase("inner"):
                c.advance(50)
            prof.begin("manual")
            c.advance(7)
            prof.end("manual")
            c.advance(10)

    _, con = record(tmp_path, fake_clock, body)
    rows = q(con, "SELECT name, start_ns, end_ns, depth FROM phases ORDER BY start_ns, depth")
    e = EPOCH0 + t0
    assert rows == [("outer", e, e + 167, 0), ("inner", e + 100, e + 150, 1), ("manual", e + 150, e + 157, 1)]


def test_same_name_nested_on_one_thread_pairs_innermost_first(tmp_path, fake_clock):
    def body(prof, c):
        with prof.phase("f"):
            c.advance(10)
            with prof.phase("f"):
                c.advance(5)
            c.advance(10)

    _, con = record(tmp_path, fake_clock, body)
    durs = sorted(r[0] for r in q(con, "SELECT end_ns - start_ns FROM phases"))
    assert durs == [5, 25]


def test_threads_record_their_own_phases(tmp_path, fake_clock):
    tids = {}

    def body(prof, c):
        barrier = threading.Barrier(3)

        def work(i):
            barrier.wait()
            with prof.phase(f"worker{i}"):
                tids[i] = threading.get_native_id()

        ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        with prof.phase("main"):
            c.advance(1)

    _, con = record(tmp_path, fake_clock, body)
    rows = dict(q(con, "SELECT name, tid FROM phases"))
    assert rows["worker0"] == tids[0] and rows["worker1"] == tids[1] and rows["worker2"] == tids[2]
    assert rows["main"] == threading.get_native_id()
    assert len(set(rows.values())) == 4


def test_steps_warmup_marks_and_step_of_each_phase(tmp_path, fake_clock):
    def body(prof, c):
        c.advance(1000)  # set-up before the loop belongs to step 0
        for i in range(4):
            with prof.phase("run"):
                c.advance(100 + i)
            prof.mark("tick")
            c.advance(10)
            prof.step()
        c.advance(500)  # after the last step(): an incomplete step, not recorded

    meta, con = record(tmp_path, fake_clock, body)
    steps = q(con, "SELECT step, end_ns - start_ns, warmup FROM steps ORDER BY step")
    assert steps == [(0, 1110, True), (1, 111, False), (2, 112, False), (3, 113, False)]
    assert q(con, "SELECT list(step ORDER BY start_ns) FROM phases WHERE name = 'run'")[0][0] == [0, 1, 2, 3]
    assert q(con, "SELECT count(*) FROM phases WHERE kind = 'mark' AND name = 'tick'")[0][0] == 4
    assert meta.warmup_steps == 1


def test_step_window_records_only_those_steps(tmp_path, fake_clock):
    def body(prof, c):
        for _ in range(10):
            with prof.phase("run"):
                c.advance(10)
            prof.step()

    meta, con = record(tmp_path, fake_clock, body, steps=(3, 5))
    assert [r[0] for r in q(con, "SELECT step FROM steps ORDER BY step")] == [3, 4, 5]
    assert q(con, "SELECT list(DISTINCT step ORDER BY step) FROM phases")[0][0] == [3, 4, 5]
    assert q(con, "SELECT bool_or(warmup) FROM steps")[0][0] is False  # a window has no warm-up
    assert meta.step_window == [3, 5]


def test_exception_in_program_still_leaves_a_complete_profile(tmp_path, fake_clock):
    def body(prof, c):
        with prof.phase("run"):
            c.advance(5)
            prof.step()
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        record(tmp_path, fake_clock, body)
    con = attach(open_profile(tmp_path / "p.dlscope"))
    assert q(con, "SELECT name, end_ns - start_ns FROM phases") == [("run", 5)]


def test_module_level_calls_are_noops_without_a_profile_and_decorator_records(tmp_path, fake_clock):
    assert dlscope.current() is None
    with dlscope.phase("nothing"):
        pass
    dlscope.mark("x")
    assert dlscope.step() == -1

    @dlscope.phase("decorated")
    def work(c):
        c.advance(42)
        return "ok"

    assert work(fake_clock) == "ok"  # nothing active: runs, records nothing

    def body(prof, c):
        assert work(c) == "ok"

    _, con = record(tmp_path, fake_clock, body)
    assert q(con, "SELECT name, end_ns - start_ns FROM phases") == [("decorated", 42)]
    assert dlscope.current() is None


def test_profile_joins_an_active_session_instead_of_starting_another(tmp_path, fake_clock):
    session = Session(
        tmp_path / "outer.dlscope", Settings(), owner="api", collectors=[], clock=fake_clock, wall_clock=fake_clock.wall
    )
    outer = api.Profile(session).start()
    try:
        with dlscope.profile(tmp_path / "inner.dlscope", batch_size=16) as inner:
            assert inner.session is outer.session
            with inner.phase("x"):
                fake_clock.advance(3)
        assert not (tmp_path / "inner.dlscope").exists()
        assert session.settings.batch_size == 16
    finally:
        outer.stop()
    assert open_profile(tmp_path / "outer.dlscope").meta.batch_size == 16


def test_finalize_needs_a_spool(tmp_path):
    from dlscope.errors import InputError

    with pytest.raises(InputError):
        finalize_profile(tmp_path / "none.dlscope")
