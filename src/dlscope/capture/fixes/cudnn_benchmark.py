"""cuDNN's autotuner (``torch.backends.cudnn.benchmark = True``): the fastest convolution
algorithm for each shape, found once."""

from __future__ import annotations

from types import ModuleType

from .base import FixContext, InjectedFix, NotApplicable


class CudnnBenchmark(InjectedFix):
    name = "cudnn_benchmark"
    rules = ()
    describe = "torch.backends.cudnn.benchmark = True"

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        if torch.backends.cudnn.benchmark:
            raise NotApplicable("the program already sets torch.backends.cudnn.benchmark")
        torch.backends.cudnn.benchmark = True
        self.changed = 1
