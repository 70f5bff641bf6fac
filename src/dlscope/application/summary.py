"""The `summary` use case: a profile's summary and the advice's findings, together."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from ..advice.finding import Finding
    from ..analysis.core.context import ProfileData
    from ..analysis.core.job_end import JobEnd
    from ..analysis.core.summary import Summary


@dataclass
class SummaryView:
    """What `dlscope summary` shows: the summary, and the findings (none for a program that failed
    before its first step: the rules judge steps)."""

    summary: Summary
    findings: list[Finding]

    def as_dict(self) -> dict[str, Any]:
        d = self.summary.as_dict()
        if self.summary.failure is None:
            d["advice"] = [f.as_dict() for f in self.findings]
        return d


def summarize(data: ProfileData) -> Summary:
    """The profile's summary alone (steps, phases, layers, devices)."""
    from ..analysis.core.summary import summarize as summarize_profile

    return summarize_profile(data)


def summary_with_advice(data: ProfileData) -> SummaryView:
    """The summary and, unless the program failed before its first step, the advice's findings."""
    from .advise import advise

    s = summarize(data)
    return SummaryView(s, advise(data).findings if s.failure is None else [])


def job_end(data: ProfileData) -> JobEnd | None:
    """How the job ended when a rank of it ended abnormally (None otherwise): what ``advise``
    says before its findings, which cover only the steps every rank completed."""
    from ..analysis.core.job_end import job_end as ended

    return ended(data)


def step_durations(data: ProfileData) -> pa.Table:
    """(step, duration_ns) of the statistics steps of the first rank, in order (the notebook's plot)."""
    from ..analysis.core.step_phases import step_durations as durations

    return durations(data)
