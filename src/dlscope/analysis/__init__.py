"""Analysis: pure functions from a profile to tables. REPORTS is the one registry of reports
(`dlscope stats --report NAME`); a new report is a module with a REPORT plus one line here
(in ``_reports``: the registry is built on first use)."""

from __future__ import annotations

from typing import Any

from .core.report import Report


def _reports() -> dict[str, Report]:
    from .reports import (
        collective_overlap,
        comm_sum,
        cuda_api_sum,
        cuda_gpu_kern_sum,
        cuda_gpu_mem_size_sum,
        cuda_gpu_mem_time_sum,
        cuda_gpu_trace,
        fsdp_units,
        gpu_metrics,
        gpu_time_breakdown,
        idle_breakdown_hta,
        idle_sum,
        kernel_metrics,
        launch_sum,
        memcpy_sum,
        memory_by_rank,
        modules,
        nvtx_sum,
        op_sum,
        overlap,
        phase_sum,
        queue_length,
        rank_balance,
        rank_waits,
        roofline,
        step_sum,
        straggler,
        tensor_core,
    )

    return {
        r.name: r
        for r in (
            step_sum.REPORT,
            phase_sum.REPORT,
            op_sum.REPORT,
            modules.REPORT,
            tensor_core.REPORT,
            roofline.REPORT,
            kernel_metrics.REPORT,
            gpu_time_breakdown.REPORT,
            comm_sum.REPORT,
            collective_overlap.REPORT,
            overlap.REPORT,
            fsdp_units.REPORT,
            straggler.REPORT,
            rank_balance.REPORT,
            rank_waits.REPORT,
            idle_sum.REPORT,
            idle_breakdown_hta.REPORT,
            launch_sum.REPORT,
            queue_length.REPORT,
            memcpy_sum.REPORT,
            gpu_metrics.REPORT,
            memory_by_rank.REPORT,
            nvtx_sum.REPORT,
            cuda_api_sum.REPORT,
            cuda_gpu_kern_sum.REPORT,
            cuda_gpu_mem_time_sum.REPORT,
            cuda_gpu_mem_size_sum.REPORT,
            cuda_gpu_trace.REPORT,
        )
    }


def __getattr__(name: str) -> Any:
    # the registry is built on first use: commands that run no report (export, import) start
    # without loading every report module
    if name == "REPORTS":
        value = globals()["REPORTS"] = _reports()
        return value
    raise AttributeError(f"module 'dlscope.analysis' has no attribute {name!r}")


__all__ = ["REPORTS", "Report"]
