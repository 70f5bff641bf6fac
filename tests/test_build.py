"""The builder's derived columns, checked against plain Python: interning, nesting (depth,
parent, self time) and the step of every event, including GPU work launched in a step."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from dlscope.store.build import Interner, ProfileBuilder


def test_interner_maps_arrays_and_keeps_nulls():
    it = Interner()
    assert it.intern("b") == 0
    ids = it.intern_array(pa.array(["a", "b", None, "a"]))
    assert ids.to_pylist() == [1, 0, None, 1]
    assert it.table().to_pydict() == {"id": [0, 1], "value": ["b", "a"]}


def random_tree(rng: random.Random, start: int, end: int, depth: int, out: list) -> None:
    """Properly nested intervals inside [start, end). A zero-length interval never touches the next
    sibling's start: [t, t] then [t, u] would be contained in its sibling, which is ambiguous."""
    t = start
    while depth < 5 and t < end - 10 and rng.random() < 0.8:
        s = rng.randint(t, end - 10)
        e = rng.randint(s, min(end, s + (end - s)))
        out.append((s, e, depth))
        random_tree(rng, s, e, depth + 1, out)
        t = e + (1 if e == s or rng.random() < 0.3 else 0)


@pytest.mark.parametrize("seed", range(20))
def test_ops_nesting_matches_a_reference(seed):
    rng = random.Random(seed)
    rows = []
    for tid in (1, 2):
        ivs: list = []
        random_tree(rng, 0, 100_000, 0, ivs)
        rows += [(tid, s, e, d) for s, e, d in ivs]
    rng.shuffle(rows)
    n = len(rows)
    b = ProfileBuilder()
    b.add(
        "ops",
        pa.table(
            {
                "rank": [0] * n,
                "pid": [9] * n,
                "tid": [r[0] for r in rows],
                "start_ns": [r[1] for r in rows],
                "end_ns": [r[2] for r in rows],
                "name": [f"op{i}" for i in range(n)],
                "op_id": list(range(n)),
            }
        ),
    )
    ops = b.build()["ops"].to_pylist()
    by_id = {o["op_id"]: o for o in ops}
    for i, (tid, s, e, d) in enumerate(rows):
        o = by_id[i]
        assert o["depth"] == d, (o, d)
        # reference parent: the tightest interval on the same thread that strictly encloses it
        # at depth d - 1
        if d == 0:
            assert o["parent_id"] is None
        else:
            p = by_id[o["parent_id"]]
            assert p["tid"] == tid and p["depth"] == d - 1 and p["start_ns"] <= s and p["end_ns"] >= e
        kids = [by_id[j] for j in by_id if by_id[j]["parent_id"] == i]
        assert o["self_ns"] == (e - s) - sum(k["end_ns"] - k["start_ns"] for k in kids)


def test_steps_of_events_and_of_gpu_work_launched_in_a_step():
    b = ProfileBuilder()
    b.add(
        "steps",
        pa.table(
            {
                "rank": [0, 0],
                "step": [5, 6],
                "start_ns": [100, 200],
                "end_ns": [200, 300],
                "source": ["dlscope"] * 2,
                "warmup": [False, False],
            }
        ),
    )
    b.add(
        "api",
        pa.table(
            {
                "rank": [0, 0, 0],
                "start_ns": [150, 250, 350],
                "end_ns": [151, 251, 351],
                "name": ["cudaLaunchKernel"] * 3,
                "correlation_id": [1, 2, 3],
                "kind": ["runtime"] * 3,
            }
        ),
    )
    # kernel 1 was launched in step 5 but runs during step 6; kernel 9 has no launch record
    b.add(
        "kernels",
        pa.table(
            {
                "rank": [0, 0, 0, 0],
                "start_ns": [210, 260, 360, 120],
                "end_ns": [220, 270, 370, 130],
                "name": ["k"] * 4,
                "correlation_id": [1, 2, 3, 9],
            }
        ),
    )
    t = b.build()
    assert t["api"].column("step").to_pylist() == [5, 6, None]
    got = sorted(zip(t["kernels"].column("correlation_id").to_pylist(), t["kernels"].column("step").to_pylist()))
    assert got == [(1, 5), (2, 6), (3, None), (9, 5)]
