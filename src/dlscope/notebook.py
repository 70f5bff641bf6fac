"""The analysis API, for notebooks and scripts: ``dlscope.open(path)``.

    import dlscope
    p = dlscope.open("train.dlscope")              # a profile, a trace (imported on the fly),
                                                   # or a folder / glob of profiles
    p.summary().steps.p50_ms                       # the numbers `dlscope summary` prints
    p.report("cuda_gpu_kern_sum").to_pandas()      # any `dlscope stats` report
    [f.id for f in p.advise()]                     # the findings of `dlscope advise`
    p.sql("select name, count(*) from kernels group by 1").to_pandas()
    p.table("kernels", "polars")                   # any table, names decoded
    dlscope.open("runs/").summary()                # a folder of profiles: {profile: Summary}
    p.diff(dlscope.open("fixed.dlscope")).shift("p50")

A folder of one job's traces (a Kineto file per rank) is imported into one profile, as
``dlscope import FOLDER`` does; on a folder or glob of profiles, :meth:`Analysis.sql` and
:meth:`Analysis.table` span them all, and :meth:`Analysis.summary`, :meth:`Analysis.advise` and
:meth:`Analysis.report` give each profile's result by its path (opened one at a time).

Every method runs the code the command line runs (the same report functions, rules and
comparison); only the output differs: Arrow tables (``.to_pandas()``, polars when installed) and
the dataclasses the analysis returns. A profile opened here stays open (one DuckDB connection)
until :meth:`Analysis.close` or the end of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analysis.core.report import ReportResult as _ReportResult
from .application.diff import Diff
from .errors import InputError, UsageError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import pyarrow as pa

    from .advice.finding import Finding
    from .analysis.core.context import ProfileData
    from .analysis.core.report import ReportResult
    from .analysis.core.summary import Summary


class Analysis:
    """One opened profile (or several: a folder or glob of profiles, whose tables :meth:`sql` and
    :meth:`table` span, and whose summaries, findings and reports come by profile)."""

    def __init__(
        self,
        path: str | Path,
        iter_start: int | None = None,
        iter_stop: int | None = None,
        include_warmup: bool = False,
        key_node: str | None = None,
    ) -> None:
        from .analysis.core.context import Selection
        from .application.open import is_trace_folder
        from .application.sql import is_many

        self.path = str(path)
        self._stack = contextlib.ExitStack()
        # a folder of traces (one job's ranks) is one profile, imported: not a fleet
        self._fleet = is_many(self.path) and not is_trace_folder(self.path)
        self._data: ProfileData | None = None
        self._fleet_con: Any = None
        if iter_start is not None and iter_stop is not None and iter_stop < iter_start:
            raise UsageError(f"iter_stop {iter_stop} is before iter_start {iter_start}")
        self.selection = Selection(iter_start, iter_stop, include_warmup, key_node)
        if self._fleet:
            from .application.sql import open_tables

            opened = open_tables(self.path)
            self._fleet_con, self.profiles = opened.con, opened.profiles
        else:
            from .application.open import open_any

            self._data, _ = open_any(self.path, self._stack, self.selection, key_node)

    # ---- what it holds -----------------------------------------------------------------------
    @property
    def data(self) -> ProfileData:
        """The opened profile (one profile only)."""
        if self._data is None:
            raise UsageError(f"{self.path} is a folder or glob of profiles: open one profile for this")
        return self._data

    @property
    def con(self) -> Any:
        """The DuckDB connection whose views are the profile's tables (every profile's, with a
        ``profile`` column, for a folder or glob)."""
        return self._fleet_con if self._fleet else self.data.con

    @property
    def tables(self) -> list[str]:
        from .application.sql import table_names

        return table_names()

    def table(self, name: str, as_: str = "arrow") -> Any:
        """Table ``name`` with names decoded, as ``'arrow'`` (default), ``'pandas'`` or ``'polars'``."""
        if name not in self.tables:
            raise UsageError(f"no table {name!r} (tables: {', '.join(self.tables)})")
        return _convert(self.sql(f"SELECT * FROM {name}"), as_)

    def sql(self, query: str) -> pa.Table:
        """DuckDB SQL over the tables, as in ``dlscope sql``."""
        from .application.sql import rows

        return rows(self.con, query)

    # ---- what the commands show --------------------------------------------------------------
    def summary(self) -> Summary | dict[str, Summary]:
        """What ``dlscope summary`` prints, as a dataclass (``.as_dict()`` is its JSON); for a folder
        or glob of profiles, each profile's by its path."""
        from .application.summary import summarize

        if self._fleet:
            return self._each(summarize)
        return summarize(self.data)

    def report(self, name: str) -> ReportResult | dict[str, ReportResult]:
        """A ``dlscope stats`` report (``.table`` is Arrow; ``.to_pandas()``; ``.rows()`` its JSON rows);
        for a folder or glob of profiles, each profile's by its path."""
        from .application.stats import run_report

        def one(data: ProfileData, path: str) -> ReportResult:
            result = run_report(data, name, path)
            return ReportView(**{f.name: getattr(result, f.name) for f in dataclasses.fields(result)})

        if self._fleet:
            return {path: one(data, path) for path, data in self._opened_each()}
        return one(self.data, self.path)

    def advise(self, what_if: bool = False) -> list[Finding] | dict[str, list[Finding]]:
        """The findings of ``dlscope advise``, largest saving first (``what_if``: only those the
        replay predicted, with their chain in ``finding.what_if``); for a folder or glob of
        profiles, each profile's by its path."""
        from .application.advise import advise

        def one(data: ProfileData) -> list[Finding]:
            found = advise(data).findings
            return Findings(f for f in found if f.what_if) if what_if else Findings(found)

        if self._fleet:
            return self._each(one)
        return one(self.data)

    def _opened_each(self) -> Iterator[tuple[str, ProfileData]]:
        from .application.open import each_profile

        return each_profile([p.path for p in self.profiles], self.selection)

    def _each(self, fn: Callable[[ProfileData], Any]) -> dict[str, Any]:
        """``fn`` of each profile of a folder or glob, by path, one profile open at a time."""
        return {path: fn(data) for path, data in self._opened_each()}

    def diff(self, other: Analysis | str | Path) -> Diff:
        """``dlscope diff self other``: what changed from this profile to ``other``."""
        from .application.diff import diff

        theirs = other if isinstance(other, Analysis) else Analysis(other)
        d = diff(self.data, theirs.data)
        return DiffView(**{f.name: getattr(d, f.name) for f in dataclasses.fields(d)})

    # ---- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        self._stack.close()
        if self._fleet_con is not None:
            self._fleet_con.close()
            self._fleet_con = None

    def __enter__(self) -> Analysis:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"dlscope.open({self.path!r})"

    def _repr_html_(self) -> str:
        """In a notebook: summary cards, the step-time distribution and the top findings."""
        from .render.notebook import analysis_html

        if self._data is None:
            return f"<pre>{self!r}: {len(self.profiles)} profiles (.sql and .table span them)</pre>"
        from .application.advise import advise
        from .application.summary import step_durations, summarize

        return analysis_html(summarize(self.data), step_durations(self.data), advise(self.data).findings, self.path)


class ReportView(_ReportResult):
    """A report's result (``.table``, ``.rows()``, ``.to_pandas()``), shown in a notebook as a table,
    and as the text table of ``dlscope stats`` by ``print()`` and the REPL (the dataclass's own repr
    showed the formatters: ``<function fixed.<locals>.fmt ...>``)."""

    def _repr_html_(self) -> str:
        from .render.notebook import report_html

        return report_html(self)

    def __repr__(self) -> str:
        from .render.notebook import MAX_ROWS
        from .render.tables import report_text

        return report_text(self.name, self.title, self.table, self.formats, self.notes, MAX_ROWS)

    __str__ = __repr__


class DiffView(Diff):
    """A diff (``.as_dict()``, ``.explain``, ...), shown in a notebook as the HTML diff's cards, step
    times, what changed the step and the advice."""

    def _repr_html_(self) -> str:
        from .render.notebook import diff_html

        return diff_html(self, self.advice)


class Findings(list["Finding"]):
    """The findings (a list), shown in a notebook as the HTML report's advice section."""

    def _repr_html_(self) -> str:
        from .render.notebook import findings_html

        return findings_html(list(self))


def open(path: str | Path, **selection: Any) -> Analysis:  # noqa: A001 - the API's name, as in the issue
    """Open a profile for analysis: ``dlscope.open("train.dlscope", iter_start=10, iter_stop=50)``.

    ``path``: a profile, a trace any importer reads (imported into a temporary profile), or a
    folder or quoted glob of profiles (then :meth:`Analysis.sql` and :meth:`Analysis.table` span
    them all). Selection keywords as the command line's: ``iter_start``, ``iter_stop``,
    ``include_warmup``, ``key_node``."""
    if not Path(path).exists() and not any(c in str(path) for c in "*?["):
        raise InputError(f"{path}: no such profile or trace")
    return Analysis(path, **selection)


def _convert(table: pa.Table, as_: str) -> Any:
    if as_ == "arrow":
        return table
    if as_ == "pandas":
        return table.to_pandas()
    if as_ == "polars":
        try:
            import polars
        except ImportError:
            raise UsageError("polars is not installed (pip install polars)") from None
        return polars.from_arrow(table)
    raise UsageError(f"as_ must be 'arrow', 'pandas' or 'polars', not {as_!r}")
