"""A larger batch: the DataLoaders' ``batch_size`` times :data:`FACTOR`, measured per sample.

``memory_underused`` predicts the step per sample with a larger batch (the replay's wave model); this
runs it. The step then processes ``FACTOR`` times the samples, so ``dlscope try`` compares time per
sample (the fix's ``samples_factor``), and says when the loss grew with the batch (a sum over the
samples rather than a mean: the gradient, and so the step the optimizer takes, grew as well).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, change_dataloaders

# Twice the batch: the first step memory_underused predicts (its wave model goes to 4x), and the one
# least likely not to fit.
FACTOR = 2


class LargerBatch(InjectedFix):
    name = FixName.BATCH
    rules = (RuleId.MEMORY_UNDERUSED,)
    describe = f"DataLoader(batch_size={FACTOR}x the program's), compared per sample"

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[tuple[int, int]] = []
        self.skipped: list[str] = []

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        fix = self

        def larger_batch(given: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any] | None:
            if given.get("batch_sampler") is not None:
                fix.skipped.append("a batch_sampler makes its batches")
                return None
            size = given.get("batch_size", defaults.get("batch_size"))
            if not isinstance(size, int) or size <= 0:
                fix.skipped.append("batch_size=None (the dataset yields whole batches)")
                return None
            given["batch_size"] = size * FACTOR
            fix.sizes.append((size, size * FACTOR))
            return given

        change_dataloaders(larger_batch)

    def outcome(self) -> tuple[bool, str]:
        self.changed = len(self.sizes)
        if self.sizes:
            old, new = self.sizes[0]
            self.applied_as = f"batch {old} -> {new}" + (f" ({len(self.sizes)} loaders)" if len(self.sizes) > 1 else "")
            self.detail = {"factor": FACTOR, "samples_factor": FACTOR, "batch_sizes": [list(s) for s in self.sizes]}
            return True, ""
        if self.skipped:
            return (
                False,
                f"the program's loaders cannot take a larger batch here: {self.skipped[0]}; change it in the source",
            )
        return False, "the batch does not come from a DataLoader's batch_size: change it in the source"
