"""The defer_sync fix (issue 38): ``.item()``/``.tolist()`` give a lazy number that is the eager one wherever it
is used, read only then; injected in-process and in a child through dlscope's bootstrap (the device type
'cpu' stands in for a GPU: the same path, with a copy that is never found landed); the cases it leaves
alone, its refusal with a reason; and the advice naming it for sync_in_step only where the sync is a read."""

from __future__ import annotations

import copy
import json
import math
import numbers
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import dlscope
from dlscope.capture.fixes import BY_NAME, FixContext, NotApplicable
from dlscope.capture.fixes.defer_sync import DeferSync
from dlscope.capture.fixes.lazy_scalar import MAX_DEPTH, LazyScalar
from dlscope.vocabulary.names import FixName

PROBE = Path(__file__).parent / "programs" / "defer_probe.py"
SRC = Path(dlscope.__file__).resolve().parents[1]  # the code under test, for the children too
DATA = Path(__file__).parent / "data"


class FakeCopy:
    """A pending copy whose landing the test decides; counts its reads."""

    def __init__(self, value: float | int, landed: bool = False) -> None:
        self.value, self.landed, self.reads = value, landed, 0

    def ready(self) -> bool:
        return self.landed

    def read(self) -> float | int:
        self.reads += 1
        return self.value


def test_a_lazy_number_is_the_eager_one_wherever_it_is_used():
    import torch

    for eager in (0.1 + 0.2, -2.75, 1e-30, 7, -3, 0):
        pending = FakeCopy(eager)
        v = LazyScalar(pending)
        # arithmetic with plain numbers stays lazy: nothing is read
        chained = [v + 1.5, 1.5 + v, v - 0.3, 0.3 - v, v * 3, 3 * v, v / 7, -v, +v, abs(v), v // 2, v % 3]
        assert all(isinstance(c, LazyScalar) for c in chained) and pending.reads == 0
        expected = [
            eager + 1.5,
            1.5 + eager,
            eager - 0.3,
            0.3 - eager,
            eager * 3,
            3 * eager,
            eager / 7,
            -eager,
            +eager,
            abs(eager),
            eager // 2,
            eager % 3,
        ]
        assert [c.value for c in chained] == expected and [type(c.value) for c in chained] == list(map(type, expected))
        assert pending.reads == 1  # read once, then known
        assert v**2 == eager**2 and 2**v == 2**eager and type(v**2) is type(eager**2)  # powers: at once
        # where the number itself is needed
        assert (v == eager, v != eager, v < 1, v <= eager, v > -1, v >= eager) == (
            True,
            False,
            eager < 1,
            True,
            eager > -1,
            True,
        )
        assert hash(v) == hash(eager) and {v: "x"}[eager] == "x" and bool(v) == bool(eager)
        assert float(v) == float(eager) and int(v) == int(eager) and complex(v) == complex(eager)
        assert round(v) == round(eager) and round(v, 2) == round(eager, 2)
        assert (math.floor(v), math.ceil(v), math.trunc(v)) == (math.floor(eager), math.ceil(eager), math.trunc(eager))
        assert f"{v:.3e}" == f"{eager:.3e}" and str(v) == str(eager) and repr(v) == repr(eager)
        assert f"{[v, v]}" == f"{[eager, eager]}" and "%.4f" % v == "%.4f" % eager  # noqa: UP031 (programs log with %-formats)
        assert math.isclose(math.exp(v), math.exp(eager)) and v.real == eager and v.imag == 0
        assert np.array([v, v]).dtype != object and np.mean([v, v]) == np.mean([eager, eager])
        assert pickle.loads(pickle.dumps(v)) == eager and type(copy.deepcopy(v)) is type(eager)
        # with a tensor, the tensor's rules decide the result, as with the eager number
        t = torch.tensor([1.0, 2.0])
        assert torch.equal(t * v, t * eager) and torch.equal(v * t, eager * t) and torch.equal(v - t, eager - t)
        assert isinstance(v, numbers.Real) and not isinstance(v, float)
    n = LazyScalar(FakeCopy(3))
    assert list(range(n)) == [0, 1, 2] and ["a", "b", "c", "d"][n] == "d" and divmod(n, 2) == (1, 1)
    with pytest.raises(TypeError):
        range(LazyScalar(FakeCopy(3.0)))  # a float is no index, lazy or not


def test_what_can_raise_raises_where_it_is_written():
    """A division by zero, or a power that overflows, raises at the line that wrote it (a try around it
    catches it), not where the result is read."""
    with pytest.raises(ZeroDivisionError):
        LazyScalar(FakeCopy(1.5)) / 0
    with pytest.raises(ZeroDivisionError):
        2.0 % LazyScalar(FakeCopy(0.0))  # a lazy divisor is read, and is zero
    with pytest.raises(OverflowError):
        LazyScalar(FakeCopy(1e300)) ** 2
    divisor = FakeCopy(4)
    q = LazyScalar(FakeCopy(1.0)) / LazyScalar(divisor)
    assert divisor.reads == 1 and isinstance(q, LazyScalar) and q == 0.25  # the dividend still waits for nothing


def test_accumulating_across_steps_reads_nothing_until_printed_and_equals_the_eager_sum():
    losses = [1.0 / (s + 3) for s in range(40)]
    copies = [FakeCopy(x) for x in losses]
    running, kept = 0.0, []
    for c in copies:
        running += LazyScalar(c)
        kept.append(LazyScalar(c))
    assert isinstance(running, LazyScalar) and sum(c.reads for c in copies) == 0
    eager = 0.0
    for x in losses:
        eager += x
    assert running == eager and f"{running:.17g}" == f"{eager:.17g}"  # the same operations in the same order
    assert json.loads(json.dumps(repr(kept))) == repr(losses)
    # a copy that has landed is folded in at once: the sum is a plain number again
    done = 0.0
    for x in losses:
        done += LazyScalar(FakeCopy(x, landed=True))
    assert type(done) is float and done == eager


def test_a_sum_never_read_keeps_its_chain_short():
    copies = [FakeCopy(1.0) for _ in range(3 * MAX_DEPTH)]
    running = 0.0
    for c in copies:
        running += LazyScalar(c)
    assert running._depth <= MAX_DEPTH + 1  # the oldest part was read when the chain grew too long
    assert copies[0].reads == 1 and copies[-1].reads == 0  # the newest copy is still not waited for
    assert running == 3 * MAX_DEPTH


def test_numbers_whose_copies_landed_are_read_at_the_next_deferral():
    """A list of losses kept unread for a whole run holds no event or pinned buffer past its copy's landing:
    each deferral first reads the oldest numbers that have landed, in order, up to one still on its way."""
    import weakref

    fix = DeferSync()
    copies = [FakeCopy(1.0, landed=True), FakeCopy(2.0, landed=True), FakeCopy(3.0), FakeCopy(4.0, landed=True)]
    kept = [LazyScalar(c) for c in copies]
    fix._unread.extend(weakref.ref(v) for v in kept)
    fix._settle()
    assert [c.reads for c in copies] == [1, 1, 0, 0] and len(fix._unread) == 2
    copies[2].landed = True
    del kept[3]  # a number the program dropped is skipped
    fix._settle()
    assert [c.reads for c in copies] == [1, 1, 1, 0] and not fix._unread
    assert kept == [1.0, 2.0, 3.0]


@pytest.fixture
def torch_restored():
    import torch

    saved = (torch.Tensor.item, torch.Tensor.tolist, json.JSONEncoder.default)
    yield torch
    torch.Tensor.item, torch.Tensor.tolist, json.JSONEncoder.default = saved


def _installed(torch, device: str = "cpu") -> DeferSync:
    fix = DeferSync()
    ctx = FixContext()
    ctx.options = {FixName.DEFER_SYNC: {"device_type": device}}
    fix.install(torch, ctx)
    return fix


def test_injected_item_and_tolist_defer_the_programs_own_reads_and_leave_the_rest(torch_restored):
    torch = torch_restored
    fix = _installed(torch)
    w = torch.nn.Parameter(torch.tensor([0.5, -1.0]))
    loss = (w * torch.tensor([2.0, 3.0])).sum() ** 2  # needs grad: .item() reads it the same
    v = loss.item()
    assert isinstance(v, LazyScalar) and v == 4.0 and json.dumps({"loss": v}) == '{"loss": 4.0}'
    count = torch.tensor(7, dtype=torch.int64).item()
    assert isinstance(count, LazyScalar) and count + 1 == 8 and type(count.value) is int
    assert isinstance(loss.tolist(), LazyScalar) and isinstance(loss.reshape(1).tolist()[0], LazyScalar)
    # left as they were: a flag, several elements, a complex number, a subclass, a call from library code
    assert type(torch.tensor(True).item()) is bool
    assert torch.tensor([1.0, 2.0]).tolist() == [1.0, 2.0] and type(torch.tensor([[3.0]]).tolist()[0][0]) is float
    assert type(torch.tensor(1 + 2j).item()) is complex
    assert type(torch.nn.Parameter(torch.tensor(2.0)).item()) is float
    library = {"t": torch.tensor(5.0)}
    exec(compile("got = t.item()", os.path.join(os.path.dirname(torch.__file__), "x.py"), "exec"), library)
    assert type(library["got"]) is float and f"{torch.tensor(1.5):.1f}" == "1.5"  # Tensor.__format__ is torch's
    applied, why = fix.outcome()
    assert applied and why == "" and fix.changed == fix.deferred == 4
    assert fix.detail["left_as_is"] == {
        "torch.bool tensor": 1,
        "torch.complex64 tensor": 1,
        "called from library code": 2,
    }
    assert fix.detail["read_before_landing"] == 2  # the two numbers read; the stand-in never lands: both waited
    assert fix.weaker  # and a run where the numbers are used at once is called weaker than the prediction


def test_refused_without_a_gpu_and_not_applied_without_a_read_to_defer(torch_restored):
    torch = torch_restored
    assert not torch.cuda.is_available()  # the CPU machine the tests run on
    with pytest.raises(NotApplicable, match="no CUDA device"):
        BY_NAME[FixName.DEFER_SYNC]().install(torch, FixContext())
    assert torch.Tensor.item is not None and type(torch.tensor(2.0).item()) is float  # nothing was patched
    fix = _installed(torch)
    assert type(torch.tensor([1.0, 2.0]).sum().item() > 0) is bool  # one element: deferred, then compared
    fix2 = _installed(torch, device="meta")  # a device the program never uses: nothing to defer
    torch.tensor(3.0).item()
    applied, why = fix2.outcome()
    assert not applied and "no .item() or .tolist() on a one-element CUDA tensor" in why and "source change" in why
    assert fix.outcome()[0]


def _child(tmp_path: Path, settings, *args: str, env: dict[str, str] | None = None):
    from dlscope.capture.launcher import child_env

    e = child_env(tmp_path / "run.dlscope", settings)
    e["PYTHONPATH"] = os.pathsep.join([e["PYTHONPATH"].split(os.pathsep)[0], str(SRC)])  # bootstrap, then this code
    e.update(env or {})
    return subprocess.run(
        [sys.executable, *map(str, args)], env=e, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )


def test_the_injector_applies_it_in_a_child_and_the_program_keeps_its_numbers(tmp_path):
    from dlscope.capture.base import Settings, TryRun
    from dlscope.capture.finalize import finalize_profile

    settings = Settings(
        torch="off",
        nvml="off",
        cupti="off",
        phase_hooks=False,
        module_hooks=False,
        try_run=TryRun([FixName.DEFER_SYNC], {FixName.DEFER_SYNC: {"device_type": "cpu"}}),
    )
    r = _child(tmp_path, settings, PROBE, tmp_path / "out.json")
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert set(out["kinds"]) == {"LazyScalar"} and len(out["kinds"]) == 12
    # the running sum stays lazy between the prints (every 4 steps), then is read
    assert out["running_kinds"][:3] == ["LazyScalar"] * 3
    assert out["running"] == out["eager_running"] and out["losses"] == out["eager"]  # to the bit
    assert out["tolist"] == ["LazyScalar", "LazyScalar"] and out["flag"] == "bool"
    assert "step 11 mean loss" in r.stderr
    finalize_profile(tmp_path / "run.dlscope")  # as the parent of a profiled run does
    meta = json.loads((tmp_path / "run.dlscope" / "meta.json").read_text())
    status = meta["collectors"]["fixes"]["settings"]["fixes"]["defer_sync"]
    assert status["applied"] and status["changed"] == 12 + 2 and not status["changes_precision"]
    assert status["detail"]["deferred"] == 14 and status["detail"]["left_as_is"] == {"torch.bool tensor": 1}


def test_try_reports_the_refusal_with_its_reason(tmp_path):
    """On this CPU machine `dlscope try --fixes defer_sync` runs the program, and says why the fix did not apply."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "PROBE_STEPS": "14"}
    env.pop("DLSCOPE_SESSION", None)
    r = subprocess.run(
        [sys.executable, "-m", "dlscope", "try", "--fixes", "defer_sync", "--steps", "3", "--repeat", "1"]
        + ["-o", str(tmp_path / "t.try"), "--format", "json", "--", sys.executable, str(PROBE), str(tmp_path / "o")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (fix,) = json.loads(r.stdout)["fixes"]
    assert fix["name"] == "defer_sync" and not fix["applied"] and "no CUDA device" in fix["reason"]


def _finding(rows: list[dict]):
    from dlscope.advice.finding import Evidence, Finding, Severity
    from dlscope.vocabulary.names import RuleId

    return Finding(RuleId.SYNC_IN_STEP, "t", Severity.MEDIUM, Evidence("e", "s", rows), 1.0, 5.0, "a", "u")


def test_sync_in_step_names_the_fix_where_the_sync_is_a_read_and_the_site_where_it_is_not():
    from dlscope.application.advise import _link_tries as link

    item = {"call": "cudaStreamSynchronize", "op": "aten::item", "inner_op": "aten::_local_scalar_dense"}
    sync = {"call": "cudaDeviceSynchronize", "op": None, "inner_op": None, "phase": "train"}
    mask = {"call": "cudaStreamSynchronize", "op": "aten::index", "inner_op": "aten::nonzero", "phase": "loss"}
    found = [_finding([item, sync]), _finding([sync, mask]), _finding([mask])]
    link(SimpleNamespace(findings=found))
    assert found[0].try_fixes == [FixName.DEFER_SYNC] and found[0].try_none is None
    assert found[1].try_fixes == [] and found[1].try_none.startswith("a source change")
    assert "cudaDeviceSynchronize in phase 'train'" in found[1].try_none
    assert "from 'aten::index' ('aten::nonzero') in phase 'loss'" in found[2].try_none


def test_advise_on_a_real_profile_names_it_and_auto_tries_it(cli):
    from dlscope.analysis.core.context import ProfileData
    from dlscope.application.advise import advise
    from dlscope.application.try_fixes import _advised

    prof = DATA / "advice_truth" / "gpt_baseline_default.dlscope"  # .item() on the loss every step
    r = cli("advise", prof, "--format", "json")
    found = {f["id"]: f for f in json.loads(r.out)}
    assert found["sync_in_step"]["try"] == {"fixes": ["defer_sync"], "why_none": None}
    assert "test it: dlscope try --fixes defer_sync -- <your command>" in cli("advise", prof).out
    _, auto = _advised(advise(ProfileData.open(prof)).findings)
    assert FixName.DEFER_SYNC in auto
    # a program whose only sync is cudaDeviceSynchronize: a source change, and auto leaves the fix out
    cupy = DATA / "gpu_h100" / "cupy_cupti.dlscope"
    f = next(f for f in advise(ProfileData.open(cupy)).findings if f.id == "sync_in_step")
    assert f.try_fixes == [] and "cudaDeviceSynchronize in phase 'compute'" in (f.try_none or "")
    assert FixName.DEFER_SYNC not in _advised([f])[1]
