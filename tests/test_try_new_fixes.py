"""The fixes issue 38 added to `dlscope try`: `pinned` (pinned loaders, their batches copied non-blocking)
and `batch` (a larger DataLoader batch, measured per sample), injected on the CPU with real torch objects,
their refusals with a reason, and the per-sample measurement against a hand computation."""

from __future__ import annotations

import statistics
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dlscope.analysis.compare.tries import Run, measure
from dlscope.capture.fixes.base import FixContext, NotApplicable


def _cuda_torch(torch: Any) -> Any:
    """torch, as seen by a fix on a machine with a GPU (the injection itself runs the same on the CPU)."""
    return SimpleNamespace(
        cuda=SimpleNamespace(is_available=lambda: True), Tensor=torch.Tensor, _C=torch._C, utils=torch.utils
    )


@pytest.fixture
def restore_torch():
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    pin_module = torch.utils.data._utils.pin_memory
    saved = (
        DataLoader.__init__,
        _BaseDataLoaderIter.__next__,
        torch.Tensor.to,
        torch.Tensor.cuda,
        pin_module.pin_memory,
    )
    yield torch
    DataLoader.__init__, _BaseDataLoaderIter.__next__, torch.Tensor.to, torch.Tensor.cuda, pin_module.pin_memory = saved


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true but no accelerator")
def test_pinned_pins_the_loaders_without_it_and_makes_their_copies_non_blocking(restore_torch, monkeypatch):
    torch = restore_torch
    from torch.utils.data import DataLoader, TensorDataset

    from dlscope.capture.fixes.pinned import PinnedMemory

    # no pinned memory and no GPU here: what the fix sees is planted (every CPU tensor reads as pinned),
    # and what reaches torch's own .to is recorded instead of copied
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: True)
    asked: list[bool] = []
    real_to = torch.Tensor.to

    def torch_own_to(t: Any, *args: Any, **kwargs: Any) -> Any:
        asked.append(bool(kwargs.get("non_blocking")))
        _, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        return real_to(t, dtype) if dtype is not None else t

    monkeypatch.setattr(torch.Tensor, "to", torch_own_to)
    # DataLoader's pin function, which needs a GPU: here it hands the batch back as it is (read as pinned)
    monkeypatch.setattr(torch.utils.data._utils.pin_memory, "pin_memory", lambda data, device=None: data)
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    next_before = _BaseDataLoaderIter.__next__
    fix = PinnedMemory()
    fix.install(_cuda_torch(torch), FixContext())
    plain = DataLoader(TensorDataset(torch.arange(8.0).reshape(4, 2)), batch_size=2)
    already = DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2, pin_memory=True)
    assert plain.pin_memory is True and already.pin_memory is True
    assert (fix.loaders, fix.pinned_already) == (1, 1)
    batches = iter(plain)
    batches._pin_memory = True  # as on a GPU machine (here torch turned it off: no accelerator)
    (x,) = next(batches)
    x.to("cuda")  # the loader's pinned batch: made non-blocking
    x.to("cuda", non_blocking=False)  # a script's written-out default (the suite's CNN): made non-blocking
    x.to("cuda", torch.float32, False)  # flags given by position: left as written
    torch.ones(2).to("cuda")  # not a loader's batch: left alone
    x.to(torch.float64)  # not a copy to the GPU: left alone
    assert asked == [True, True, False, False, False]
    # the next batch too: the fix leaves the iterators' __next__ alone (dlscope's DataLoader hook puts back the
    # __next__ it found after the first batch; a fix wrapping it lost every batch after the first, on the H200)
    assert _BaseDataLoaderIter.__next__ is next_before
    (x2,) = next(batches)
    x2.to("cuda")
    assert asked[-1] is True
    assert fix.outcome() == (True, "") and fix.copies == 3
    assert fix.detail == {"loaders_pinned": 1, "loaders_pinned_already": 1, "copies_non_blocking": 3}


def test_pinned_refuses_without_a_gpu_and_says_when_nothing_changed(restore_torch):
    torch = restore_torch
    from dlscope.capture.fixes.pinned import PinnedMemory

    with pytest.raises(NotApplicable, match="no CUDA device"):
        PinnedMemory().install(SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False)), FixContext())
    idle = PinnedMemory()
    idle.install(_cuda_torch(torch), FixContext())
    assert idle.outcome() == (
        False,
        "the program made no DataLoader (its copies come from elsewhere: pin those buffers in the source)",
    )


def test_batch_doubles_the_loaders_batch_and_refuses_a_batch_sampler(restore_torch):
    torch = restore_torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    from dlscope.capture.fixes.batch import FACTOR, LargerBatch

    data = TensorDataset(torch.arange(64.0).reshape(32, 2))
    fix = LargerBatch()
    fix.install(torch, FixContext())
    loader = DataLoader(data, batch_size=4, shuffle=False)
    assert loader.batch_size == 4 * FACTOR and next(iter(loader))[0].shape[0] == 4 * FACTOR
    assert fix.outcome() == (True, "") and fix.applied_as == f"batch 4 -> {4 * FACTOR}"
    assert fix.detail["samples_factor"] == FACTOR
    refused = LargerBatch()
    refused.install(torch, FixContext())
    DataLoader(data, batch_sampler=BatchSampler(SequentialSampler(data), 4, False))
    applied, why = refused.outcome()
    assert not applied and "batch_sampler" in why
    none = LargerBatch()
    none.install(torch, FixContext())
    assert none.outcome() == (False, "the batch does not come from a DataLoader's batch_size: change it in the source")


def _runs(label: str, medians: list[float], losses: list[float], seed: int) -> list[Run]:
    rng = np.random.default_rng(seed)
    return [Run(label, i, 0, list(m + rng.uniform(-0.5, 0.5, 15)), losses=losses) for i, m in enumerate(medians)]


def test_a_larger_batch_is_measured_per_sample():
    """Twice the batch in 1.6x the step: 20% saved per sample (the step itself is 60% longer)."""
    base = _runs("baseline", [100, 101, 99], [2.0, 2.0], seed=0)
    fixed = _runs("batch", [160, 161.6, 158.4], [2.02, 2.0], seed=1)
    for r in fixed:
        r.fixes = {"batch": {"applied": True, "detail": {"samples_factor": 2}, "applied_as": "batch 4 -> 8"}}
    o = measure("batch", ["memory_underused"], base, fixed, predicted_pct=25.0)
    a = statistics.median([s for r in base for s in r.steps_ms])
    b = statistics.median([s / 2 for r in fixed for s in r.steps_ms])
    assert o.measured_saving_pct == pytest.approx(100 * (a - b) / a) and 18 < o.measured_saving_pct < 22
    assert o.significant and not o.loss_diverged and "grew" not in o.loss_note


def test_a_loss_that_sums_its_samples_is_named_not_called_diverged():
    base = _runs("baseline", [100, 101, 99], [2.0, 2.1], seed=0)
    fixed = _runs("batch", [160, 161.6, 158.4], [4.0, 4.2], seed=1)  # a sum: twice the samples, twice the loss
    for r in fixed:
        r.fixes = {"batch": {"applied": True, "detail": {"samples_factor": 2}}}
    o = measure("batch", ["memory_underused"], base, fixed, predicted_pct=None)
    assert not o.loss_diverged and "the loss grew 2.00x with the 2x batch" in o.loss_note
