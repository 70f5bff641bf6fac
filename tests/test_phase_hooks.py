"""dlscope's PyTorch hooks time dataloader, forward, backward and optimizer in every step, traced
or not; checked against the same phases timed by hand in the program."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from dlscope.analysis.core.class_times import step_class_times, untraced_class_times
from dlscope.analysis.core.context import ProfileData

from .conftest import q, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"
STEPS = 14


def _profile(tmp_path: Path) -> tuple[ProfileData, list[dict[str, list[int]]]]:
    out, hand = tmp_path / "h.dlscope", tmp_path / "hand.json"
    r = run_dlscope(
        "profile",
        "-o",
        out,
        "--quiet",
        "--",
        sys.executable,
        PROGRAMS / "hand_timed.py",
        str(STEPS),
        hand,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    return ProfileData.open(out), json.loads(hand.read_text())


def test_hook_phases_in_every_step_match_hand_timed_ones(tmp_path):
    data, hand = _profile(tmp_path)
    offset = next(iter(data.meta.clock["offsets"].values()))["offset_ns"]
    rows = q(data.con, "SELECT name, start_ns, end_ns, step FROM phases WHERE source = 'hook' ORDER BY start_ns")
    by_name: dict[str, list[tuple[int, int, int]]] = {}
    for name, s, e, step in rows:
        by_name.setdefault(name, []).append((s, e, step))
    assert set(by_name) == {"dataloader", "forward", "backward", "optimizer"}
    traced = {r[0] for r in q(data.con, "SELECT step FROM steps WHERE traced")}
    untraced = {r[0] for r in q(data.con, "SELECT step FROM steps WHERE NOT traced")}
    assert traced and len(untraced) >= 5
    for name, got in by_name.items():
        assert len(got) == STEPS, name
        assert {g[2] for g in got} >= untraced  # every untraced step has it
        stalled = []
        for i, ((s, e, step), h) in enumerate(zip(got, hand)):
            hs, he = h[name][0] + offset, h[name][1] + offset
            # the hook's phase lies inside the hand-timed one
            assert hs - 1_000 <= s <= e <= he + 1_000, (name, s - hs, he - e)
            # in untraced steps the hook covers the phase but what runs around it (a traced step may
            # also pay for writing the trace, after the hook)
            if step in untraced and (he - hs) - (e - s) >= max(300_000, 0.2 * (he - hs)):
                stalled.append(i)
        # a loaded machine can deschedule the program between its own timer and the hook: once per
        # phase is allowed (seen once in CI beside a fuzz run: 4.1 ms in one forward), not more
        assert len(stalled) <= 1, (name, stalled)
        hand_ns = np.array([h[name][1] - h[name][0] for h in hand])
        hook_ns = np.array([e - s for s, e, _ in got])
        # over the untraced steps the hooks' total is within 5% of the hand-timed total, or 150 us a
        # call: what runs around the hooks stays outside (a module call's dispatch, ~12 us here;
        # Optimizer.step's wrapper and dlscope's step boundary after its post-hook, 50-65 us on a
        # quiet 2-core VM, 116 us a call while a fuzz run shared it)
        idx = [i for i, (_, _, st) in enumerate(got) if st in untraced and i not in stalled]
        err = abs(hook_ns[idx].sum() - hand_ns[idx].sum())
        assert err <= max(0.05 * hand_ns[idx].sum(), 150_000 * len(idx)), (name, err)
    # the phases derived from the Kineto trace gave way to the hooks' (one set of boundaries)
    assert q(data.con, "SELECT count(*) FROM phases WHERE source = 'derived'") == [(0,)]


def test_class_times_split_each_untraced_step(tmp_path):
    data, hand = _profile(tmp_path)
    t = step_class_times(data, "stat_steps")
    parts = sum(t[f"{c}_ns"] for c in ("input", "optimizer", "model", "other"))
    assert np.array_equal(parts, t["step_ns"])
    offset = next(iter(data.meta.clock["offsets"].values()))["offset_ns"]
    steps = dict(q(data.con, "SELECT step, start_ns FROM steps"))
    # model = forward + backward, input = dataloader, optimizer: hand-timed, per step
    stalled: dict[str, int] = {}
    for i, step in enumerate(t["step"].tolist()):
        h = hand[step]
        assert steps[step] is not None and offset
        for col, names in (
            ("input_ns", ("dataloader",)),
            ("model_ns", ("forward", "backward")),
            ("optimizer_ns", ("optimizer",)),
        ):
            want = sum(h[n][1] - h[n][0] for n in names)
            got = int(t[col][i])
            # a loaded machine can deschedule the program between its own timer and the hook: the
            # hand-timed phase is then longer (seen in CI beside a fuzz run: 4.1 ms in one step's
            # dataloader). Once per class is allowed, as in the test above; never the other way
            if want - got >= max(300_000, 0.2 * want):
                stalled[col] = stalled.get(col, 0) + 1
                continue
            # what runs around the hooks stays outside them (Optimizer.step's wrapper, the step
            # boundary: ~50 us here, more on a loaded machine)
            assert abs(got - want) <= max(0.15 * want, 250_000), (step, col, got, want)
    assert all(n <= 1 for n in stalled.values()), stalled
    ct = untraced_class_times(data)
    assert ct is not None and ct.hooked and ct.steps == len(t["step"])
