"""TF32 for fp32 matrix math (``torch.backends.cuda.matmul.allow_tf32``, cuDNN's too)."""

from __future__ import annotations

from types import ModuleType

from ...vocabulary.names import FixName, RuleId
from .base import FixContext, InjectedFix, NotApplicable


class Tf32(InjectedFix):
    name = FixName.TF32
    rules = (RuleId.NO_TENSOR_CORES,)
    describe = "fp32 matrix math on TF32 tensor cores (torch.set_float32_matmul_precision('high'))"
    changes_precision = True

    def install(self, torch: ModuleType, ctx: FixContext) -> None:
        if torch.get_float32_matmul_precision() != "highest":
            raise NotApplicable(
                f"the program already sets float32 matmul precision '{torch.get_float32_matmul_precision()}'"
            )
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        self.changed = 1
