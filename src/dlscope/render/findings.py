"""Advice findings in the terminal (for ``dlscope advise``): one block per finding, most costly
first as the rules return them, with its estimated saving and its evidence as a small table.

A finding is any object with the fields ``id, title, severity, evidence, saving_ms_per_step,
saving_pct, advice, url`` (the contract of ``dlscope.advice``); evidence may be text, a list of
rows (dicts) or an Arrow table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
EVIDENCE_ROWS = 5


def _rows(evidence: Any) -> list[dict[str, Any]] | None:
    if isinstance(evidence, pa.Table):
        return evidence.to_pylist()
    if isinstance(evidence, dict):
        return [evidence]
    if isinstance(evidence, Sequence) and not isinstance(evidence, str) and all(isinstance(r, dict) for r in evidence):
        return list(evidence)
    return None


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def render_findings(findings: Sequence[Any], out: Console) -> None:
    """Print ``findings`` (names from the profile are escaped for rich markup)."""
    if not findings:
        out.print("No rule found a problem in this profile.")
        return
    for i, f in enumerate(findings):
        if i:
            out.print()
        sev = str(getattr(f, "severity", "info")).lower()
        out.print(Text.assemble((sev.upper(), SEVERITY_STYLE.get(sev, "")), " ",
                                (str(getattr(f, "title", "")), "bold"), f" ({getattr(f, 'id', '')})"))
        saving = []
        if getattr(f, "saving_ms_per_step", None) is not None:
            saving.append(f"up to {f.saving_ms_per_step:,.2f} ms per step")
        if getattr(f, "saving_pct", None) is not None:
            saving.append(f"{f.saving_pct:.1f}% of step time")
        if saving:
            out.print("  estimated saving: " + escape(", ".join(saving)))
        if getattr(f, "advice", None):
            out.print("  " + escape(str(f.advice)))
        ev = getattr(f, "evidence", None)
        rows = _rows(ev)
        if rows:
            cols = list(dict.fromkeys(k for r in rows for k in r))
            t = Table(show_edge=False, header_style="bold", pad_edge=False, box=None)
            for c in cols:
                t.add_column(escape(str(c)), overflow="fold")
            for r in rows[:EVIDENCE_ROWS]:
                t.add_row(*[escape(_cell(r.get(c))) for c in cols])
            out.print(t)
            if len(rows) > EVIDENCE_ROWS:
                out.print(f"  ... {len(rows) - EVIDENCE_ROWS:,} more rows")
        elif ev:
            out.print("  evidence: " + escape(str(ev)))
        if getattr(f, "url", None):
            out.print("  see " + escape(str(f.url)))
