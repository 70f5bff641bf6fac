"""A value computed ahead on a second DuckDB connection (analysis/core/prefetch.py): the roofline
the advice run prefetches is the one computed directly, and a worker that fails or is not taken
changes nothing."""

from __future__ import annotations

import pytest

from dlscope import advice
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports import roofline as rl

from .conftest import DATA

PROFILE = DATA / "roofline" / "gpt_bf16_full.dlscope"


def _same(a: rl.Roofline, b: rl.Roofline) -> None:
    assert a.table.equals(b.table)
    assert (a.ops, a.kernel_ns, a.modelled_ns, a.unmodelled_ns, a.saving_ns) == (
        b.ops,
        b.kernel_ns,
        b.modelled_ns,
        b.unmodelled_ns,
        b.saving_ns,
    )


def test_prefetched_roofline_is_the_direct_one() -> None:
    direct = rl.roofline(ProfileData.open(PROFILE))
    assert direct.ops  # the profile has a roofline to compare
    data = ProfileData.open(PROFILE)
    rl.prefetch(data)
    assert data._pending  # started: taken by the next read
    _same(rl.roofline(data), direct)
    assert not data._pending


def test_failing_prefetch_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    direct = rl.roofline(ProfileData.open(PROFILE))
    data = ProfileData.open(PROFILE)

    def broken(worker: ProfileData) -> rl.Roofline:
        worker.con.execute("SELECT * FROM no_such_table")
        raise AssertionError("unreachable")

    data.prefetch(f"roofline {rl.TARGET_PCT}", broken)
    _same(rl.roofline(data), direct)  # computed by the caller instead


def test_untaken_prefetch_is_cancelled() -> None:
    data = ProfileData.open(PROFILE)
    rl.prefetch(data)
    data.cancel_prefetches()
    assert not data._pending
    data.con.execute("SELECT 1").fetchall()  # the connection is free for the caller


def test_advice_run_same_with_and_without_prefetch(monkeypatch: pytest.MonkeyPatch) -> None:
    with_prefetch = advice.run(ProfileData.open(PROFILE)).to_record()
    monkeypatch.setattr(ProfileData, "prefetch", lambda self, name, make: None)
    assert advice.run(ProfileData.open(PROFILE)).to_record() == with_prefetch
