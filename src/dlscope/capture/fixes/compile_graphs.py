"""``torch.compile(mode='reduce-overhead')`` of each outermost module: compiled kernels replayed as
CUDA graphs, one launch for the whole forward (and backward) instead of one per kernel: the fix for
a launch-bound step. Only when named, as ``compile``."""

from __future__ import annotations

from typing import ClassVar

from ...vocabulary.names import FixName, RuleId
from .compile import Compile


class CompileGraphs(Compile):
    name = FixName.COMPILE_GRAPHS
    rules: ClassVar[tuple[RuleId, ...]] = (RuleId.LAUNCH_BOUND,)
    describe = "torch.compile(mode='reduce-overhead') of the outermost module's forward (CUDA graphs)"
    mode = "reduce-overhead"
