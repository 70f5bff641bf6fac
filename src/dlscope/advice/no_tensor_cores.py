"""no_tensor_cores: matrix math that could run on tensor cores runs on CUDA cores in fp32.

Measured: the time per step of GEMM, convolution and attention kernels whose names say fp32 on
CUDA cores (``*sgemm*``, ``*_ffma*``, cuDNN's fp32 engines: :mod:`dlscope.analysis.core.math_kernels`),
and the ops that launched them. PyTorch runs fp32 matmuls this way unless TF32 is allowed
(``torch.backends.cuda.matmul.allow_tf32`` is False by default since 1.12).

Where it sits: with module data (the ``modules`` report), the text names the module holding most
of that time (:func:`.module_share.where_it_sits`).

Saving (upper bound): that kernel time times (1 - 1/S), S the peak throughput ratio of the TF32
tensor-core path over fp32 CUDA cores on this GPU (:mod:`.hardware`; on a GPU without TF32, the
16-bit path autocast would take). Real GEMMs reach less of the faster peak, and the step shrinks
only by as much as the host waited for the GPU (:meth:`.context.Context.gpu_saving_cap`).
"""

from __future__ import annotations

from typing import Any

from ..analysis.core.hardware import ratios_label
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .math_work import (
    MatrixMathRule,
    kernel_share,
    math_by_kernel,
    ops_phrase,
    touches_convolution,
    touches_matmul,
)
from .module_share import where_it_sits
from .rule import MIN_SAVING_PCT
from .text import ms

TOP = 6
URL_TF32 = "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"
URL_AMP = "https://pytorch.org/docs/stable/amp.html"
URL_CUDA = "https://docs.nvidia.com/cuda/cublas/index.html#cublassetmathmode"


class NoTensorCores(MatrixMathRule):
    id = RuleId.NO_TENSOR_CORES
    alternative_to = RuleId.AMP_NOT_ENABLED  # 16-bit autocast puts the same kernels on tensor cores
    title = "Matrix math runs on CUDA cores instead of tensor cores"
    description = (
        "tensor-core-eligible GEMMs and convolutions run in fp32 on CUDA cores (TF32 or AMP would use tensor cores)"
    )

    def check(self, ctx: Context) -> Finding | None:
        rows = math_by_kernel(ctx, ("fp32",))
        t32 = sum(r["ms_per_step"] for r in rows)
        dev = ctx.facts.device
        tf32 = dev.tf32_speedup() if dev else 8.0
        factor = tf32 or (dev.low_speedup(False) if dev else 8.0)
        gpu_saving = t32 * (1 - 1 / factor)
        judged = ctx.judge_gpu_cut(gpu_saving, MIN_SAVING_PCT)
        if judged is None:
            return None
        saving, cap_note = judged
        path = "TF32 tensor cores" if tf32 else "fp16 tensor cores"
        gpu_name = ratios_label(dev)
        text = (
            f"{ms(t32)} of matrix math per step runs in fp32 on CUDA cores ({kernel_share(ctx, t32)}): "
            f"{ops_phrase(rows)}"
        )
        from ..analysis.measures.modules import math_split

        where = where_it_sits(math_split(ctx.data, ("fp32",)))
        if where:
            text += f"; {where}"
        how = (
            f"{path} peak at {factor:g}x the fp32 CUDA-core rate on {gpu_name}: the kernels could take "
            f"{ms(gpu_saving)} less per step" + (f", {cap_note}" if cap_note else "") + f"; up to {ms(saving)} per step"
        )
        advice, url = self._advice(ctx, rows, bool(tf32))
        found = self.finding(ctx, saving, Evidence(text, how, rows[:TOP]), advice, url=url)
        found.choice = self._choice(ctx, bool(tf32))
        return found

    def _choice(self, ctx: Context, tf32: bool) -> str:
        """This change in a few words, beside its alternative's (:mod:`.alternatives`)."""
        if not tf32:
            return "fp16 on tensor cores: this GPU has no TF32"
        if not ctx.facts.torch:
            return "TF32: one math-mode setting per cuBLAS/cuDNN handle, fp32's range kept"
        return "TF32: one line at start-up, fp32's range kept with a 10-bit mantissa"

    def _advice(self, ctx: Context, rows: list[dict[str, Any]], tf32: bool) -> tuple[str, str]:
        if not ctx.facts.torch:
            return (
                "Let cuBLAS and cuDNN use tensor cores for fp32 data: cublasSetMathMode(handle, "
                "CUBLAS_TF32_TENSOR_OP_MATH) (cublasLt: CUBLAS_COMPUTE_32F_FAST_TF32), "
                "cudnnSetConvolutionMathType(desc, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)."
                if tf32
                else (
                    "This GPU has no TF32: compute in fp16 with fp32 accumulation (cublasGemmEx with CUDA_R_16F "
                    "inputs) to use its tensor cores."
                )
            ), URL_CUDA
        if not tf32:
            return (
                (
                    "This GPU has tensor cores for fp16 but no TF32: run the forward pass and loss under "
                    "torch.autocast('cuda', dtype=torch.float16) and scale the loss with torch.amp.GradScaler('cuda')."
                ),
                URL_AMP,
            )
        parts = []
        if touches_matmul(rows) or not touches_convolution(rows):
            parts.append("torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))")
        if touches_convolution(rows):
            parts.append("torch.backends.cudnn.allow_tf32 = True (the default; something turned it off)")
        return (
            (
                f"Allow TF32 once at start-up: {' and '.join(parts)}. TF32 keeps fp32 range with a 10-bit mantissa, "
                "which training tolerates; for more speed, see amp_not_enabled."
            ),
            URL_TF32,
        )

    def what_if(self, ctx: Context, finding: Finding) -> Fix:
        dev = ctx.facts.device
        tf32 = dev.tf32_speedup() if dev else 8.0
        factor = tf32 or (dev.low_speedup(False) if dev else 8.0)
        return Fix(
            self.id, f"fp32 matrix math on tensor cores at the peak ratio ({factor:g}x)", gpu={"simt_ns": 1 / factor}
        )


RULE = NoTensorCores()
