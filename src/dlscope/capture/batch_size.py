"""The batch size of a run when the user did not give it: read from the DataLoader the program
iterates, once, at its first batch.

Why: samples/s (and every fix that scales the batch) needs the batch size, and a user who does
not pass ``--batch-size`` (or ``dlscope.profile(batch_size=...)``) usually has a DataLoader that
knows it. Where it came from is recorded beside it (``meta.json``'s ``batch_size_source``), since
a size read from the first batch's first tensor is a guess (a batch of token ids and their
lengths, a last batch cut short) where one given or set on the loader is not.

:func:`detect_batch_size` is the one place that decides it: the phase hooks
(:mod:`.torch_hooks`) call it at the first batch, and a fix that changes the batch can call it on
the loader it changes.
"""

from __future__ import annotations

from typing import Any

# where meta.json's batch_size came from (its batch_size_source; None: not recorded, as in
# profiles written before it was)
GIVEN = "given"  # --batch-size or dlscope.profile(batch_size=...)
LOADER = "DataLoader.batch_size"  # the attribute of the DataLoader the program iterated
FIRST_BATCH = "first batch"  # the first dimension of the first tensor of the first batch

# how deep to look into a batch's nested tuples, lists and dicts for its first tensor
_MAX_DEPTH = 4


def detect_batch_size(loader_batch_size: Any, batch: Any) -> tuple[int, str] | None:
    """``(size, source)`` of a DataLoader's batches: its ``batch_size`` attribute where it is set
    (a positive int), else the first dimension of the first tensor of ``batch`` (depth first
    through tuples, lists and dict values; anything with a ``shape`` counts: a torch tensor, a
    numpy array), else None (no batching the loader knows of, and no tensor with a dimension)."""
    if isinstance(loader_batch_size, int) and not isinstance(loader_batch_size, bool) and loader_batch_size > 0:
        return loader_batch_size, LOADER
    n = _first_dim(batch, _MAX_DEPTH)
    return (n, FIRST_BATCH) if n is not None else None


def _first_dim(obj: Any, depth: int) -> int | None:
    shape = getattr(obj, "shape", None)
    if shape is not None and not isinstance(obj, type):
        try:
            n = int(shape[0]) if len(shape) else None
        except (TypeError, ValueError, IndexError):
            n = None
        return n if n is not None and n > 0 else None
    if depth <= 0 or isinstance(obj, (str, bytes)):
        return None
    if isinstance(obj, dict):
        items: Any = obj.values()
    elif isinstance(obj, (tuple, list)):
        items = obj
    else:
        return None
    for item in items:
        n = _first_dim(item, depth - 1)
        if n is not None:
            return n
    return None
