"""Number formats shared by the text and HTML views of a diff: a value, a signed change, a
signed percentage; '-' where there is none."""

from __future__ import annotations


def value(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def change(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:+,.{digits}f}"


def change_pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"
