"""The `stats` use case: run registered reports on an opened profile; those that cannot run say why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from ..analysis.core.context import ProfileData
    from ..analysis.core.report import ReportResult


def all_report_names() -> list[str]:
    """Every registered report, in the registry's order."""
    from ..analysis import REPORTS

    return list(REPORTS)


def report_names(text: str) -> list[str]:
    """The reports ``--report`` names ("all", or names comma-separated); UsageError for unknown ones."""
    known = all_report_names()
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return known
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"unknown report {', '.join(unknown) or repr(text)}; reports: {', '.join(known)}")
    return names


@dataclass
class ReportsRun:
    """The reports that ran, in the order asked, and why the others could not."""

    results: list[ReportResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


def run_reports(data: ProfileData, names: list[str]) -> ReportsRun:
    """Each named report on ``data``, or why it cannot run there."""
    from ..analysis import REPORTS

    run = ReportsRun()
    for name in names:
        rep = REPORTS[name]
        why = rep.missing(data)
        if why:
            run.skipped[name] = why
            continue
        run.results.append(rep.compute(data))
    return run


def run_report(data: ProfileData, name: str, where: str) -> ReportResult:
    """The report ``name`` on ``data`` (``where``: how the user named the profile, for the error);
    a UsageError when there is no such report or it cannot run there."""
    from ..analysis import REPORTS

    rep = REPORTS.get(name)
    if rep is None:
        raise UsageError(f"no report {name!r} (reports: {', '.join(REPORTS)})")
    why = rep.missing(data)
    if why:
        raise UsageError(f"report {name} cannot run on {where}: {why}")
    result: ReportResult = rep.compute(data)
    return result
