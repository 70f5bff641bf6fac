"""What a report is: a name, what it needs, and a pure function from a profile to a table.

A report module defines one :class:`Report` and is listed once in ``analysis.REPORTS``. Its
``compute`` returns a :class:`ReportResult`: a table of raw values (integers in the schema's
units, unrounded floats) plus per-column text formats. Renderers apply the formats for table and
CSV output; JSON gets the raw values. Column names are the report's public contract: the
nsys-equivalent reports use nsys's own names (``Total Time (ns)``) so that scripts written for
``nsys stats --format csv`` read ours.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .context import ProfileData

Formatter = Callable[[Any], str]


@dataclass
class ReportResult:
    name: str
    title: str
    table: pa.Table
    formats: dict[str, Formatter] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def rows(self) -> list[dict[str, Any]]:
        """The rows as ``dlscope stats --format json`` prints them (values JSON cannot hold as text)."""
        import json

        rows: list[dict[str, Any]] = json.loads(json.dumps(self.table.to_pylist(), default=str))
        return rows

    def to_pandas(self) -> Any:
        return self.table.to_pandas()


@dataclass(frozen=True)
class Report:
    """``needs``: tables that must hold rows for the report to say anything; when one is empty
    the report is skipped with ``why_not`` instead of returning an empty table."""

    name: str
    title: str
    compute: Callable[[ProfileData], ReportResult]
    needs: tuple[str, ...] = ()
    needs_steps: bool = False
    needs_ranks: int = 1  # ranks the profile must hold (a comparison across ranks needs two)
    doc: str = ""
    precondition: Callable[[ProfileData], str | None] | None = None  # anything else: why not, or None

    def missing(self, data: ProfileData) -> str | None:
        """Why this report cannot run on ``data``, or None."""
        empty = [t for t in self.needs if not data.has(t)]
        if empty:
            return f"the profile has no {', '.join(empty)} data"
        if self.needs_steps and not data.step_count():
            return "the profile has no steps"
        if self.needs_ranks > 1 and (data.scalar("SELECT count(DISTINCT rank) FROM steps") or 0) < self.needs_ranks:
            return f"the profile holds one rank: comparing ranks needs {self.needs_ranks} or more"
        return self.precondition(data) if self.precondition is not None else None


def fixed(digits: int, thousands: bool = False) -> Formatter:
    """Format a number with ``digits`` decimals (nsys rounds half to even, like Python)."""
    spec = f"{',' if thousands else ''}.{digits}f"

    def fmt(v: Any) -> str:
        return "" if v is None else format(float(v), spec)

    return fmt


def integer(thousands: bool = False) -> Formatter:
    def fmt(v: Any) -> str:
        return "" if v is None else (f"{int(v):,}" if thousands else str(int(v)))

    return fmt
