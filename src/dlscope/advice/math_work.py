"""The matrix math of the GPU windows, by precision, op and kernel: shared by the tensor-core and
mixed-precision rules (measured by :mod:`dlscope.analysis.measures.math_kernels`)."""

from __future__ import annotations

from typing import Any

from ..analysis.measures.math_kernels import MATH_PRECISIONS, matrix_math
from .context import Context
from .rule import Rule
from .text import kernel_label, merge_rows, ms, op_label, steps


class MatrixMathRule(Rule):
    """A rule about the precision GEMMs, convolutions and attention run in: it reads CUDA/ROCm
    kernel names in the selected steps, on a GPU that has tensor cores."""

    needs = ("kernels",)
    needs_gpu = True
    cuda_only = True

    def precondition(self, ctx: Context) -> str | None:
        dev = ctx.facts.device
        if dev is not None and not dev.has_tensor_cores:
            return f"the GPU ({dev.name}) has no tensor cores"
        return None


def math_by_kernel(ctx: Context, precisions: tuple[str, ...]) -> list[dict[str, Any]]:
    """Per (op, kernel) of the given precision classes (among :data:`MATH_PRECISIONS`): calls
    and ms per step, the steps seen, longest first. ``op`` is the framework op that launched the
    kernel (NULL without ops)."""
    unknown = set(precisions) - set(MATH_PRECISIONS)
    if unknown:
        raise ValueError(f"precision classes {sorted(unknown)} are not among {MATH_PRECISIONS}")
    rows = _labelled(ctx)
    return [r for r in rows if r["precision"] in precisions]


def _labelled(ctx: Context) -> list[dict[str, Any]]:
    """The measured matrix math as evidence rows: ops and kernels labelled, steps written out,
    rows that became equal merged."""
    rows = [
        {
            "op": op_label(m.op),
            "kernel": kernel_label(m.kernel),
            "precision": m.precision,
            "calls_per_step": m.calls_per_step,
            "ms_per_step": m.ms_per_step,
            "steps": steps(m.steps),
        }
        for m in matrix_math(ctx.data)
    ]
    return merge_rows(rows, ("op", "kernel", "precision"), ("calls_per_step", "ms_per_step"))


def ops_phrase(rows: list[dict[str, Any]], limit: int = 3) -> str:
    """'aten::mm (36.7 ms), aten::addmm (9.3 ms)': the ops with most time, or kernels without ops."""
    by: dict[str, float] = {}
    for r in rows:
        key = r["op"] or r["kernel"]
        by[key] = by.get(key, 0.0) + r["ms_per_step"]
    top = sorted(by.items(), key=lambda kv: -kv[1])[:limit]
    return ", ".join(f"{k} ({ms(v)})" for k, v in top)


def touches_convolution(rows: list[dict[str, Any]]) -> bool:
    return any(
        "conv" in (r["op"] or r["kernel"] or "").lower()
        or "grad" in (r["kernel"] or "").lower()
        or "fprop" in (r["kernel"] or "").lower()
        for r in rows
    )


def touches_matmul(rows: list[dict[str, Any]]) -> bool:
    return any(
        any(t in (r["op"] or r["kernel"] or "").lower() for t in ("mm", "linear", "matmul", "gemm", "bmm"))
        and "conv" not in (r["op"] or "").lower()
        for r in rows
    )


def kernel_share(ctx: Context, ms_per_step: float) -> str:
    """'85% of the kernel time' for a per-step amount of kernel time."""
    k = ctx.kernel_ms
    return f"{100 * ms_per_step / k:.0f}% of the kernel time" if k else "no kernel time to compare"
