"""Small HTML building blocks shared by the report's sections; every text passes through esc."""

from __future__ import annotations

from collections.abc import Sequence

from .svg import esc


def ms(ns: float | None, digits: int = 3) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.{digits}f}"


def num(v: float | None, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{digits}f}"


def count(v: int | None) -> str:
    """A count with thousands separators ("-" for a NULL a malformed profile let through)."""
    return "-" if v is None else f"{v:,}"


def pct(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}%"


def section(anchor: str, title: str, body: str, intro: str = "") -> str:
    head = f'<h2 id="{esc(anchor)}">{esc(title)}</h2>'
    return f"<section>{head}{f'<p class=intro>{esc(intro)}</p>' if intro else ''}{body}</section>"


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>'


def cards(items: Sequence[tuple[str, str, str]]) -> str:
    """Headline numbers: (label, value, detail)."""
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{esc(value)}</div>'
            f'<div class="detail">{esc(detail)}</div></div>'
            for label, value, detail in items
        )
        + "</div>"
    )


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None, cls: str = ""
) -> str:
    """A table of plain-text cells (escaped here). ``numeric`` columns are right-aligned."""
    numeric = numeric or [False] * len(headers)
    head = "".join(f'<th class="{"num" if n else "txt"}">{esc(h)}</th>' for h, n in zip(headers, numeric))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"num" if n else "txt"}">{esc(c)}</td>' for c, n in zip(row, numeric)) + "</tr>"
        for row in rows
    )
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def bar_cell(share: float | None) -> str:
    """A horizontal bar for a 0-100 share, drawn with CSS."""
    w = 0.0 if share is None else max(0.0, min(100.0, share))
    return f'<div class="hbar"><div style="width:{w:.1f}%"></div></div>'


def name_table(
    headers: Sequence[str], rows: Sequence[tuple[str, Sequence[str], float | None]], cls: str = "names"
) -> str:
    """A ranking: a long name (cut with an ellipsis, whole on hover), numbers, and a bar for the
    share, scaled to the largest so that the ranking reads at a glance (the % is in the cells)."""
    top = max((r[2] or 0.0 for r in rows), default=0.0) or 1.0
    head = (
        f'<th class="txt">{esc(headers[0])}</th>'
        + "".join(f'<th class="num">{esc(h)}</th>' for h in headers[1:])
        + "<th></th>"
    )
    body = []
    for name, cells, share in rows:
        body.append(
            f'<tr><td class="txt name" title="{esc(name)}">{esc(name)}</td>'
            + "".join(f'<td class="num">{esc(c)}</td>' for c in cells)
            + f"<td>{bar_cell(None if share is None else 100.0 * share / top)}</td></tr>"
        )
    return f'<table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def key_values(items: Sequence[tuple[str, str]]) -> str:
    return (
        '<table class="kv"><tbody>'
        + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items)
        + "</tbody></table>"
    )
