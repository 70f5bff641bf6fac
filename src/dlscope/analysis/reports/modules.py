"""modules: GPU kernel time, kernels and host time per nn.Module, forward and backward, as a tree.

The figures are :func:`dlscope.analysis.measures.modules.module_view`'s: one row per module path
pattern (repeated blocks together: ``h.*.attn``), descendants included, per step; then the
optimizer's work and the forward and backward work outside any module.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.report import Report, ReportResult, fixed
from ..measures.modules import ModuleView, module_view

GPU_COLUMNS = ("fwd_gpu_ms", "fwd_kernels", "bwd_gpu_ms", "bwd_kernels", "gpu_ms", "kernels", "gpu_pct")


def table(view: ModuleView) -> pa.Table:
    """The report's table (also the HTML section's rows)."""
    rows = view.rows
    gpu_total = view.fwd_bwd_gpu_ms
    ops_total = view.fwd_bwd_ops_ms

    def share(v: float | None, total: float | None) -> float | None:
        return None if v is None or not total else 100.0 * v / total

    return pa.table(
        {
            "module": [r.module for r in rows],
            "part": [r.part for r in rows],
            "type": [r.type for r in rows],
            "depth": pa.array([r.depth for r in rows], pa.int32()),
            "instances": pa.array([r.instances for r in rows], pa.int32()),
            "calls": [r.calls_per_step for r in rows],
            "fwd_gpu_ms": pa.array([r.fwd_gpu_ms for r in rows], pa.float64()),
            "fwd_kernels": pa.array([r.fwd_kernels for r in rows], pa.float64()),
            "bwd_gpu_ms": pa.array([r.bwd_gpu_ms for r in rows], pa.float64()),
            "bwd_kernels": pa.array([r.bwd_kernels for r in rows], pa.float64()),
            "gpu_ms": pa.array([r.gpu_ms for r in rows], pa.float64()),
            "kernels": pa.array([r.kernels for r in rows], pa.float64()),
            "gpu_pct": pa.array([share(r.gpu_ms, gpu_total) for r in rows], pa.float64()),
            "fwd_host_ms": [r.fwd_host_ms for r in rows],
            "bwd_host_ms": [r.bwd_host_ms for r in rows],
            "ops_ms": [r.ops_ms for r in rows],
            "ops_pct": pa.array([share(r.ops_ms, ops_total) for r in rows], pa.float64()),
        }
    )


def notes(view: ModuleView) -> list[str]:
    out = [
        f"per step, over the {view.steps} traced step(s) with module calls (the hooks run only there); a module's "
        "figures include its descendants'; repeated blocks are summed (an all-digit path segment is * where "
        "the modules there are of one class)",
        "backward work is the module's whose forward op has the backward node's autograd sequence number",
    ]
    if view.gpu_coverage_pct is not None:
        out.append(
            f"modules hold {view.gpu_coverage_pct:.1f}% of the forward and backward kernel time "
            f"({view.fwd_bwd_gpu_ms:.3f} ms per step); gpu_pct is of that time (the optimizer's row: its own "
            "kernels, apart)"
        )
    if view.ops_coverage_pct is not None:
        out.append(
            f"modules hold {view.ops_coverage_pct:.1f}% of the forward and backward host op time (ops' self "
            f"times, {view.fwd_bwd_ops_ms:.3f} ms per step); ops_pct is of that time"
        )
    return out


def compute(data: ProfileData) -> ReportResult:
    view = module_view(data)
    if view is None:
        t = pa.table({"module": pa.array([], pa.string())})
        return ReportResult("modules", REPORT.title, t, {}, ["no module calls in the selected steps"])
    t = table(view)
    if view.fwd_bwd_gpu_ms is None:
        t = t.drop_columns(list(GPU_COLUMNS))
    ms = fixed(3)
    formats = {c: ms for c in ("fwd_gpu_ms", "bwd_gpu_ms", "gpu_ms", "fwd_host_ms", "bwd_host_ms", "ops_ms")}
    formats.update({c: fixed(1) for c in ("calls", "fwd_kernels", "bwd_kernels", "kernels", "gpu_pct", "ops_pct")})
    return ReportResult("modules", REPORT.title, t, formats, notes(view))


def _why_not(data: ProfileData) -> str | None:
    if not data.has("module_calls"):
        return (
            "the profile has no module calls (recorded by `dlscope profile` of a PyTorch program in its traced "
            "steps after the warm-up, since dlscope 0.x)"
        )
    return None


REPORT = Report(
    "modules",
    "Modules (nn.Module tree)",
    compute,
    needs_steps=True,
    precondition=_why_not,
    doc="per nn.Module path (repeated blocks together): forward and backward GPU time, kernels and host time",
)
