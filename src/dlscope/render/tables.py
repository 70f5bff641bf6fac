"""Formatting a result table as text, CSV or JSON (``dlscope sql``, ``dlscope stats``)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table as RichTable

Formatter = Callable[[Any], str]


def _plain(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        return repr(v) if abs(v) < 1e16 else f"{v:.6g}"
    return str(v)


def to_csv(table: pa.Table, formats: dict[str, Formatter] | None = None) -> str:
    formats = formats or {}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(table.column_names)
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    fmts = [formats.get(n, _plain) for n in table.column_names]
    for row in zip(*cols):
        w.writerow([f(v) if v is not None else "" for f, v in zip(fmts, row)])
    return buf.getvalue()


def to_json(table: pa.Table) -> str:
    return json.dumps(table.to_pylist(), indent=1, default=str)


def _human(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".") if abs(v) < 1e15 else f"{v:.4g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def rich_table(
    table: pa.Table, title: str | None = None, formats: dict[str, Formatter] | None = None, max_rows: int | None = None
) -> RichTable:
    formats = formats or {}
    t = RichTable(title=title, title_justify="left", header_style="bold", show_edge=False, pad_edge=False)
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema]
    for name, num in zip(table.column_names, numeric):
        t.add_column(name, justify="right" if num else "left", overflow="fold")
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    fmts = [formats.get(n, _human) for n in table.column_names]
    for i, row in enumerate(zip(*cols)):
        if max_rows is not None and i >= max_rows:
            break
        t.add_row(*[f(v) if v is not None else "" for f, v in zip(fmts, row)])
    return t


# A terminal table stops here: a long run's per-step table has 100k rows, which no one reads on
# a terminal and which took rich two minutes to lay out. csv and json print every row.
TABLE_MAX_ROWS = 500


def render(
    table: pa.Table, fmt: str, console: Console, title: str | None = None, formats: dict[str, Formatter] | None = None
) -> None:
    if fmt == "csv":
        console.file.write(to_csv(table, formats))
    elif fmt == "json":
        console.file.write(to_json(table) + "\n")
    else:
        shown = table.slice(0, TABLE_MAX_ROWS)
        console.print(rich_table(shown, title, formats))
        if table.num_rows > TABLE_MAX_ROWS:
            console.print(
                f"  ... {table.num_rows - TABLE_MAX_ROWS:,} more rows (--format csv or --format json prints them all)"
            )


def report_text(
    name: str, title: str, table: pa.Table, formats: dict[str, Formatter], notes: list[str], max_rows: int
) -> str:
    """A report as ``dlscope stats --report NAME`` prints it, for ``print(p.report(NAME))`` and the
    REPL: title, table (``max_rows`` at most), notes. As wide as the table: nothing folds."""
    buf = io.StringIO()
    out = Console(file=buf, width=100_000, color_system=None, highlight=False, soft_wrap=True)
    out.print(f"{name}: {title}", markup=False)
    out.print(rich_table(table, formats=formats, max_rows=max_rows))
    if table.num_rows > max_rows:
        out.print(
            f"  ... {table.num_rows - max_rows:,} more rows: .table (Arrow) or .to_pandas() has them all", markup=False
        )
    for note in notes:
        out.print(f"  note: {note}", markup=False)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())
