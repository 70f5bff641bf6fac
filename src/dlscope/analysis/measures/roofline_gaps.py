"""The ops whose kernels ran far below their roofline: the rows of the roofline report
(:mod:`dlscope.analysis.reports.roofline`) under its target share of the roofline, with what the
advice needs to name a likely cause (the matrix product's M, N, K and batch, whether its kernels used
the tensor cores, whether it ran inside PyTorch's unfused attention). Only modelled ops with the GPU's
peaks are here: an op the performance model does not know is never guessed at."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..reports.roofline import REPORT, TARGET_PCT, prefetch, roofline
from . import measured


@dataclass(frozen=True)
class OpGap:
    """One op name and input shapes under the target share of its roofline, per step."""

    op: str
    input_shapes: str | None
    dtype: str
    kind: str  # the model's kind: 'gemm', 'conv', 'attention', 'norm', 'elementwise' ...
    detail: str
    peak: str  # the roof it is held to ('BF16 tensor', 'FP32 (CUDA cores)' ...)
    calls_per_step: float
    ms_per_step: float
    peak_pct: float
    saving_ms_per_step: float  # its kernel time above the target share of its roofline
    gemm: tuple[int, int, int, int] | None  # (M, N, K, batch) of a matrix product
    tensor_cores: bool  # some of its kernels are tensor-core kernels
    sdpa_math: bool  # launched inside scaled_dot_product_attention's unfused (math) path


@dataclass(frozen=True)
class RooflineGaps:
    """``ops``: under ``target_pct`` of their roofline with time to give back, most saving first;
    ``why_not``: why there is no roofline (no peaks for the GPU), else None."""

    target_pct: float
    gpu: str | None
    sms: int | None  # the GPU's SMs, from the datasheet entry the peaks came from
    why_not: str | None
    steps: int | None  # the selected steps with GPU work the per-step figures are over (None: no steps)
    modelled_ms_per_step: float
    ops: tuple[OpGap, ...]


@measured
def roofline_gaps(data: ProfileData, target_pct: float = TARGET_PCT) -> RooflineGaps:
    """The roofline report's rows under ``target_pct`` % of their roofline (per step of the report's steps);
    none, with the reason, where the report cannot run (no input shapes) or the GPU has no peaks."""
    why = REPORT.missing(data)
    if why is not None:
        return RooflineGaps(target_pct, None, None, why, None, 0.0, ())
    r = roofline(data, target_pct)
    per_step = r.steps or 1
    peaks = r.gpu.peaks
    gaps = [
        OpGap(
            o.op,
            o.input_shapes,
            o.cost.dtype,
            o.cost.kind,
            o.cost.detail,
            o.peak_label or "",
            o.calls / per_step,
            o.ns / 1e6 / per_step,
            o.peak_pct,
            o.saving_ns_per_step / 1e6,
            o.cost.gemm,
            o.tc_ns > 0,
            o.sdpa_math,
        )
        for o in r.ops
        if o.peak_pct is not None and o.saving_ns_per_step and o.peak_pct < target_pct
    ]
    gaps.sort(key=lambda g: (-g.saving_ms_per_step, g.op, g.input_shapes or ""))
    return RooflineGaps(
        target_pct,
        r.gpu.name,
        peaks.sms if peaks else None,
        None if peaks else r.gpu.found.why_not,
        r.steps,
        r.modelled_ns / 1e6 / per_step,
        tuple(gaps),
    )


def prefetch_roofline_gaps(data: ProfileData, target_pct: float = TARGET_PCT) -> None:
    """Start the roofline :func:`roofline_gaps` reads in the background, for a caller that will
    read it later (the advice run, before its first rule)."""
    prefetch(data, target_pct)
