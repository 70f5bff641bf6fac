"""The notebook views (``_repr_html_``) of an opened profile, a report, findings and a diff, made
from the HTML report's own blocks and inline SVG plots. No script: Jupyter shows them as they are.

The report's style sheet is scoped under ``.dlscope`` (every selector prefixed, ``:root`` and
``body`` mapped to the wrapper) so that it styles these views and nothing else of the notebook.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING, Any

from .html import blocks, details, plots
from .html.svg import esc

if TYPE_CHECKING:
    from ..analysis.core.report import ReportResult

# rows a notebook shows of a report; the rest is one line saying how many
MAX_ROWS = 50


def scoped_css() -> str:
    css = resources.files("dlscope.render.html").joinpath("style.css").read_text(encoding="utf-8")
    css = re.sub(r"@media[^{]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}", "", css)  # page-only rules

    def scope(m: re.Match[str]) -> str:
        sels = []
        for sel in m.group(1).split(","):
            sel = sel.strip()
            sels.append(".dlscope" if sel in (":root", "body", "html") else f".dlscope {sel}")
        return ", ".join(sels) + " {"

    return re.sub(r"([^{}]+)\{", scope, css)


def wrap(body: str) -> str:
    return f'<div class="dlscope"><style>{scoped_css()}</style>{body}</div>'


def report_html(result: ReportResult) -> str:
    table = result.table
    rows = table.slice(0, MAX_ROWS).to_pylist()
    cols = table.column_names
    fmt = result.formats

    def cell(c: str, v: Any) -> str:
        if v is None:
            return ""
        f = fmt.get(c)
        return f(v) if f is not None else (f"{v:,.3f}" if isinstance(v, float) else str(v))

    numeric = [table.schema.field(c).type.id in _NUMERIC_IDS for c in cols]
    body = blocks.table(cols, [[cell(c, r[c]) for c in cols] for r in rows], numeric)
    more = table.num_rows - len(rows)
    if more > 0:
        body += blocks.note(f"{more:,} more rows: .table (Arrow) or .to_pandas() has them all.")
    for n in result.notes:
        body += blocks.note(n)
    return wrap(blocks.section(result.name, f"{result.name}: {result.title}", body))


def findings_html(findings: list[Any]) -> str:
    return wrap(details.advice_section(findings))


def analysis_html(summary: Any, durations: Any, findings: list[Any], path: str) -> str:
    """Summary cards, the step-time distribution and the top findings."""
    parts = [f"<h2>dlscope: {esc(path)}</h2>", details.summary_section(summary, None, None, None)]
    if durations is not None and durations.num_rows:
        parts.append(plots.steps_section(durations))
    parts.append(details.advice_section(findings[:3]))
    return wrap("".join(parts))


def _numeric_ids() -> set[Any]:
    import pyarrow as pa

    return {
        pa.int8().id,
        pa.int16().id,
        pa.int32().id,
        pa.int64().id,
        pa.uint32().id,
        pa.uint64().id,
        pa.float32().id,
        pa.float64().id,
    }


_NUMERIC_IDS = _numeric_ids()


def diff_html(d: Any, advice: dict[str, list[dict[str, Any]]]) -> str:
    """A diff's cards, step times, what changed the step and the advice (``dlscope diff --format html``'s
    sections)."""
    from .html.diff import diff_sections

    head = f"<h2>dlscope diff: {esc(d.a)} vs {esc(d.b)}</h2>"
    return wrap(head + "".join(diff_sections(d, advice, brief=True)))
