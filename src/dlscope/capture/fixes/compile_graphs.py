"""``torch.compile(mode='reduce-overhead')`` of each outermost module: compiled kernels replayed as
CUDA graphs, one launch for the whole forward (and backward) instead of one per kernel: the fix for
a launch-bound step. Only when named, as ``compile``."""

from __future__ import annotations

from typing import ClassVar

from .compile import Compile


class CompileGraphs(Compile):
    name = "compile_graphs"
    rules: ClassVar[tuple[str, ...]] = ("launch_bound",)
    describe = "torch.compile(mode='reduce-overhead') of the outermost module's forward (CUDA graphs)"
    mode = "reduce-overhead"
