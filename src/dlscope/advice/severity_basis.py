"""Severity rests on the basis: what a finding may claim when no step was timed without tracing.

The tracer slows the host, never the GPU, so a profile whose every timed step was traced (``dlscope
profile --mode full``, an imported Kineto or nsys trace) overstates whatever depends on the host's
pace: the GPU's idle time, launch waits, exposed communication. The replay already caps its own
predictions on such profiles (:data:`.what_if.TRACED_ONLY_CAP`); this caps every other finding the
same way, unless its rule judges from evidence the tracer does not touch (step times and NVML
samples of every step, ``Rule.judges_untraced``). ``docs/estimates.md`` has the table.
"""

from __future__ import annotations

from . import alternatives
from .context import Context
from .finding import Finding, cap_severity
from .what_if import TRACED_ONLY_CAP

NOTE = (
    "Every step was traced, so no step measured without the tracer confirms the host's timing: at most "
    f"{TRACED_ONLY_CAP.upper()}."
)


def apply(ctx: Context, findings: list[Finding]) -> list[Finding]:
    """``findings``, those judged from traced timing alone capped at :data:`TRACED_ONLY_CAP`."""
    if ctx.basis.traced_excluded:  # the timings come from untraced steps
        return findings
    for f in findings:
        if f.untraced:
            continue
        capped = cap_severity(f.severity, TRACED_ONLY_CAP)
        if capped != f.severity:
            f.severity = capped
            if NOTE not in f.evidence.saving:
                f.evidence.saving += " " + NOTE
    return alternatives.ranked(findings)
