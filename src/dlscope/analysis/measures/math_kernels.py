"""The matrix math of the GPU windows (GEMMs, convolutions, attention), by launching op, kernel
and precision class (:mod:`dlscope.analysis.core.math_kernels`): calls and time per GPU window and the
steps seen. Only the classes of :data:`MATH_PRECISIONS` are measured."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.kernel_names import kernel_names, kernel_op_join
from . import measured
from .basis import basis, in_gpu_windows

# the precision classes rules ask about; one query serves them all (no_tensor_cores and
# amp_not_enabled each asked for theirs: 0.2 s apiece on a 500k-event profile)
MATH_PRECISIONS = ("fp32", "fp32_tc")


@dataclass(frozen=True)
class MathKernelUse:
    """One (op, kernel, precision) of the matrix math, per GPU window."""

    op: str | None  # the framework op that launched the kernel (None without ops)
    kernel: str
    precision: str  # one of MATH_PRECISIONS
    calls_per_step: float
    ms_per_step: float
    steps: tuple[int | None, ...]


@measured
def matrix_math(data: ProfileData) -> tuple[MathKernelUse, ...]:
    """The matrix math kernels of the :data:`MATH_PRECISIONS` classes, longest first."""
    windows = max(basis(data).windows, 1)
    wanted = ", ".join(f"'{p}'" for p in MATH_PRECISIONS)
    rows = data.rows(f"""
        SELECT o.name AS op, k.name AS kernel, k.precision,
               count(*)::DOUBLE / {windows} AS calls_per_step,
               sum(k.end_ns - k.start_ns)::DOUBLE / 1e6 / {windows} AS ms_per_step,
               list(DISTINCT k.step ORDER BY k.step) AS steps
        FROM (SELECT k.*, n.precision FROM kernels k JOIN {kernel_names(data)} n ON n.name_id = k.name_id
              {in_gpu_windows(data, "k")}) k {kernel_op_join(data)}
        WHERE k.precision IN ({wanted})
        GROUP BY ALL ORDER BY ms_per_step DESC""")
    return tuple(
        MathKernelUse(
            r["op"], r["kernel"], r["precision"], r["calls_per_step"], r["ms_per_step"], tuple(r["steps"] or ())
        )
        for r in rows
    )
