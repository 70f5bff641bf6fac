"""Analysis: pure functions from a profile to tables. REPORTS is the one registry of reports
(`dlscope stats --report NAME`); a new report is a module with a REPORT plus one line here."""

from __future__ import annotations

from . import gpu_metrics, phase_sum, step_sum
from .report import Report

REPORTS: dict[str, Report] = {r.name: r for r in (
    step_sum.REPORT,
    phase_sum.REPORT,
    gpu_metrics.REPORT,
)}

__all__ = ["REPORTS", "Report"]
