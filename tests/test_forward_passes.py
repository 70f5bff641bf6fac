"""One ``forward`` per forward pass (issue 41, item 6): a loss module called after the model is part
of the step's forward, not a second one. Checked on a real run against the program's own timing of
its model and loss calls, and the merge rules on small tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa

from dlscope.analysis.core.context import ProfileData
from dlscope.capture.forward_passes import merge_forward_calls

from .conftest import q, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"
STEPS = 14


def test_a_loss_module_is_part_of_the_steps_one_forward(tmp_path):
    out, hand_path = tmp_path / "l.dlscope", tmp_path / "hand.json"
    r = run_dlscope(
        "profile",
        "-o",
        out,
        "--quiet",
        "--",
        sys.executable,
        PROGRAMS / "loss_module.py",
        str(STEPS),
        hand_path,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    data, hand = ProfileData.open(out), json.loads(hand_path.read_text())
    offset = next(iter(data.meta.clock["offsets"].values()))["offset_ns"]
    fw = q(
        data.con,
        "SELECT start_ns, end_ns, step FROM phases WHERE source = 'hook' AND name = 'forward' ORDER BY start_ns",
    )
    bw = q(data.con, "SELECT step FROM phases WHERE source = 'hook' AND name = 'backward' ORDER BY start_ns")
    # one forward per step (it was two: the model's call and the loss module's)
    assert len(fw) == len(bw) == len(hand) == STEPS
    assert [f[2] for f in fw] == [b[0] for b in bw]
    for (s, e, _), h in zip(fw, hand):
        (m0, m1), (l0, l1) = [[t + offset for t in h[k]] for k in ("model", "loss")]
        assert m0 - 1_000 <= s <= m1  # opens at the model call
        assert l0 <= e <= l1 + 1_000  # closes at the end of the loss module's call
    # the phase breakdown says the same
    n = q(data.con, "SELECT count(*) FROM phases WHERE name = 'forward' AND step IN (SELECT step FROM steps)")[0][0]
    assert n == STEPS


# ---- the merge rules on small tables (times in ns, one step [0, 100) unless said) ----------------


def _tables(
    rows: list[tuple[str, int, int]],
    steps: list[tuple[int, int]] = ((0, 100),),
    gpu: list[tuple[int, int, int, int]] | None = None,
    tid: list[int] | None = None,
) -> dict[str, pa.Table]:
    hooked = {"forward", "backward", "optimizer", "dataloader", "sync"}
    t = {
        "phases": pa.table(
            {
                "tid": pa.array(tid or [1] * len(rows), pa.int64()),
                "start_ns": pa.array([r[1] for r in rows], pa.int64()),
                "end_ns": pa.array([r[2] for r in rows], pa.int64()),
                "name": [r[0] for r in rows],
                "kind": ["range"] * len(rows),
                "source": ["hook" if r[0] in hooked else "dlscope" for r in rows],
            }
        ),
        "steps": pa.table(
            {
                "start_ns": pa.array([s[0] for s in steps], pa.int64()),
                "end_ns": pa.array([s[1] for s in steps], pa.int64()),
            }
        ),
    }
    if gpu is not None:
        t["phase_gpu"] = pa.table(
            {
                "tid": pa.array([1] * len(gpu), pa.int64()),
                "name": ["forward"] * len(gpu),
                **{
                    c: pa.array([g[i] for g in gpu], pa.int64())
                    for i, c in enumerate(("start_ns", "end_ns", "gpu_start_ns", "gpu_end_ns"))
                },
            }
        )
    return t


def _forwards(tables: dict[str, pa.Table]) -> list[tuple[int, int]]:
    p = merge_forward_calls(tables)["phases"].to_pylist()
    return sorted((r["start_ns"], r["end_ns"]) for r in p if r["name"] == "forward")


def test_calls_of_one_pass_merge_and_others_stay_apart():
    model, loss, backward = ("forward", 10, 20), ("forward", 22, 25), ("backward", 30, 40)
    assert _forwards(_tables([model, loss, backward])) == [(10, 25)]
    # a user phase wholly between the calls is inside the merged forward
    assert _forwards(_tables([model, ("metrics", 20, 21), loss, backward])) == [(10, 25)]
    # gradient accumulation: backward between two passes
    assert _forwards(_tables([model, ("backward", 21, 22), ("forward", 23, 25)])) == [(10, 20), (23, 25)]
    # a step boundary between
    assert _forwards(_tables([model, loss], steps=[(0, 21), (21, 100)])) == [(10, 20), (22, 25)]
    # no steps: an inference loop keeps one forward per call
    assert _forwards(_tables([model, loss], steps=[])) == [(10, 20), (22, 25)]
    # the merged range would cross a user phase around the model call, or around the loss call
    assert _forwards(_tables([model, ("model", 9, 21), loss])) == [(10, 20), (22, 25)]
    assert _forwards(_tables([model, ("loss", 21, 26), loss])) == [(10, 20), (22, 25)]
    # other threads are other passes
    assert _forwards(_tables([model, loss], tid=[1, 2])) == [(10, 20), (22, 25)]


def test_the_gpu_marks_of_a_merged_forward_become_one():
    t = merge_forward_calls(
        _tables([("forward", 10, 20), ("forward", 22, 25)], gpu=[(10, 20, 50, 70), (22, 25, 71, 90)])
    )
    assert t["phase_gpu"].to_pylist() == [
        {"tid": 1, "name": "forward", "start_ns": 10, "end_ns": 25, "gpu_start_ns": 50, "gpu_end_ns": 90}
    ]
