"""cuDNN's autotuner (``torch.backends.cudnn.benchmark = True``): the fastest convolution
algorithm for each shape, found once."""

from __future__ import annotations

from types import ModuleType

from ...vocabulary.names import FixName
from .base import FixContext, InjectedFix, NotApplicable


class CudnnBenchmark(InjectedFix):
    name = FixName.CUDNN_BENCHMARK
    rules = ()
    describe = "torch.backends.cudnn.benchmark = True"

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        if torch.backends.cudnn.benchmark:
            raise NotApplicable("the program already sets torch.backends.cudnn.benchmark")
        torch.backends.cudnn.benchmark = True
        self.changed = 1
