"""Advice findings in the terminal (for ``dlscope advise``): one block per finding, most costly
first as the rules return them, with its estimated saving and its evidence as a small table; a
group of alternatives (``Finding.alternatives``: pick one) is led by the line that says so.

A finding is any object with the fields ``id, title, severity, evidence, saving_ms_per_step,
saving_pct, advice, url`` (the contract of ``dlscope.advice``); evidence may be text, a list of
rows (dicts), an Arrow table, or an object (or dict) with ``text``, ``saving`` (how the saving
was bounded) and ``rows``, as ``dlscope.advice.Evidence``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..advice.finding import WhatIf
from ..analysis.models.replay import CalibrationBasis

SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan", "info": "dim"}
EVIDENCE_ROWS = 5


def evidence_parts(evidence: Any) -> tuple[str | None, str | None, Any]:
    """(text, saving explanation, rows) of a finding's evidence in any of its accepted forms."""
    if isinstance(evidence, dict) and ("rows" in evidence or "text" in evidence):
        return evidence.get("text"), evidence.get("saving"), evidence.get("rows")
    if hasattr(evidence, "rows") and hasattr(evidence, "text") and not isinstance(evidence, pa.Table):
        return getattr(evidence, "text", None), getattr(evidence, "saving", None), evidence.rows
    if isinstance(evidence, str):
        return evidence, None, None
    return None, None, evidence


def pct_basis(f: Any) -> str:
    """What a finding's saving_pct is a share of: step time, or the profile's time when the
    profile has no steps (then saving_ms_per_step is None)."""
    return "step time" if getattr(f, "saving_ms_per_step", None) is not None else "the profile's time"


def saving_phrase(f: Any, digits: int = 2) -> str:
    """'predicted 12.30 ms per step, 14.2% of step time; 8.10 ms once input_bound is fixed' for a
    finding the replay predicted (it has ``what_if``), else 'up to ...' (the rule's bound); '' when
    the finding has no saving."""
    what_if = _what_if(f)
    ms_v = getattr(f, "saving_ms_per_step", None)
    pct_v = getattr(f, "saving_pct", None)
    parts = []
    if ms_v is not None:
        parts.append(f"{ms_v:,.{digits}f} ms per step")
    if pct_v is not None:
        parts.append(f"{pct_v:.{max(digits - 1, 0)}f}% of {pct_basis(f)}")
    if not parts:
        return ""
    head = ("predicted " if what_if else "up to ") + ", ".join(parts)
    others = getattr(f, "alternatives", None)
    if others:  # its saving alone: the others are other ways to the same end, not steps after it
        head += f" alone (or instead: {', '.join(str(o) for o in others)})"
    if what_if and what_if.fixed_above:
        above = what_if.fixed_above
        head += (
            f"; {what_if.saving_after_above_ms:,.{digits}f} ms once {', '.join(above)} "
            f"{'is' if len(above) == 1 else 'are'} fixed"
        )
    return head


def group_note(findings: Sequence[Any], i: int) -> str | None:
    """The line that says the findings from ``i`` on are alternatives (pick one), where ``i`` is the
    first of such a group (the others follow it); else None."""
    f = findings[i]
    note = getattr(f, "alternatives_note", None)
    if not note or (i and getattr(findings[i - 1], "id", None) in (getattr(f, "alternatives", None) or ())):
        return None
    return str(note)


def _what_if(f: Any) -> WhatIf | None:
    """A finding's :class:`WhatIf`, from a Finding or from its JSON dict."""
    w = f.get("what_if") if isinstance(f, dict) else getattr(f, "what_if", None)
    if isinstance(w, dict):
        return WhatIf.from_dict(w)
    return w


def _rows(evidence: Any) -> list[dict[str, Any]] | None:
    if isinstance(evidence, pa.Table):
        rows: list[dict[str, Any]] = evidence.to_pylist()
        return rows
    if isinstance(evidence, dict):
        return [evidence]
    if isinstance(evidence, Sequence) and not isinstance(evidence, str) and all(isinstance(r, dict) for r in evidence):
        return list(evidence)
    return None


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.0f}" if v.is_integer() and abs(v) >= 1000 else f"{v:,.3f}"
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
        note = group_note(findings, i)
        if note:
            out.print(Text.assemble(("ALTERNATIVES", "bold magenta"), " ", note))
        sev = str(getattr(f, "severity", "info")).lower()
        out.print(
            Text.assemble(
                (sev.upper(), SEVERITY_STYLE.get(sev, "")),
                " ",
                (str(getattr(f, "title", "")), "bold"),
                f" ({getattr(f, 'id', '')})",
            )
        )
        saving = saving_phrase(f)
        text, bound, ev = evidence_parts(getattr(f, "evidence", None))
        if saving:
            out.print("  saving: " + escape(saving))
        if bound:
            out.print("  how: " + escape(str(bound)))
        if text:
            out.print("  evidence: " + escape(str(text)))
        if getattr(f, "advice", None):
            out.print("  advice: " + escape(str(f.advice)))
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
        elif ev and not text:
            out.print("  evidence: " + escape(str(ev)))
        tried = _try_line(f)
        if tried:
            out.print("  " + escape(tried))
        if getattr(f, "url", None):
            out.print("  see " + escape(str(f.url)))


def _try_line(f: Any) -> str | None:
    """How ``dlscope try`` tests the finding: the command, or why no run can."""
    fixes = getattr(f, "try_fixes", None)
    if fixes:
        return f"test it: dlscope try --fixes {','.join(fixes)} -- <your command>"
    why = getattr(f, "try_none", None)
    return f"test it: no fix to inject ({why})" if why else None


def render_top_findings(findings: Sequence[Any], out: Console, profile: str, limit: int = 3) -> None:
    """The summary's advice block: the ``limit`` largest findings, one line each plus their
    advice, and where to read all of them with the evidence."""
    out.print()
    if not findings:
        out.print("[bold]Advice[/bold]  no rule found a problem (dlscope advise PATH --verbose lists what was checked)")
        return
    shown = findings[:limit]
    more = (
        f"top {len(shown)} of {len(findings)}"
        if len(findings) > len(shown)
        else f"{len(findings)} finding" + ("s" if len(findings) != 1 else "")
    )
    out.print(f"[bold]Advice[/bold]  ({more}; dlscope advise {escape(profile)} for the evidence)")
    for f in shown:
        sev = str(getattr(f, "severity", "info")).lower()
        saving = saving_phrase(f, digits=1)
        saving = f": {saving}" if saving else ""
        out.print(
            Text.assemble(
                "  ",
                (f"{sev.upper():<8}", SEVERITY_STYLE.get(sev, "")),
                " ",
                (str(getattr(f, "title", "")), "bold"),
                saving,
                f" [{getattr(f, 'id', '')}]",
            )
        )
        if getattr(f, "advice", None):
            out.print(Text("           " + str(f.advice)))


def render_what_if(findings: Sequence[Any], out: Console) -> None:
    """``dlscope advise --what-if``: for each finding the replay could model, the step time now,
    after its fix alone, and after it and every finding ranked above it (the chain of fixes)."""
    rows = [f for f in findings if getattr(f, "what_if", None)]
    if not rows:
        out.print(
            "No finding has a what-if: the profile has no traced steps with runtime calls and GPU work to replay."
        )
        return
    t = Table(
        show_edge=False,
        header_style="bold",
        pad_edge=False,
        box=None,
        title="Predicted step time (ms) after each fix, from a replay of the traced steps",
    )
    for c in (
        "rank",
        "finding",
        "now",
        "this fix alone",
        "saving",
        "after the fixes above",
        "then with this fix",
        "saving there",
    ):
        t.add_column(c, justify="left" if c == "finding" else "right")
    for i, f in enumerate(findings, 1):
        w = _what_if(f)
        if w is None:
            continue
        per = " /sample" if w.per_sample else ""
        after = w.after_above_ms if w.after_above_ms is not None else w.step_ms
        after_fixed = w.after_above_fixed_ms if w.after_above_fixed_ms is not None else w.fixed_step_ms
        t.add_row(
            str(i),
            escape(str(f.id)),
            f"{w.step_ms:,.2f}",
            f"{w.fixed_step_ms:,.2f}{per}",
            f"{w.saving_ms:,.2f}",
            f"{after:,.2f}",
            f"{after_fixed:,.2f}",
            f"{w.saving_after_above_ms:,.2f}",
        )
    out.print(t)
    f0 = _what_if(rows[0])
    assert f0 is not None
    factors = f0.host_factors or {}
    if f0.calibration is CalibrationBasis.PER_CLASS and any(abs(v - 1.0) > 0.02 for v in factors.values()):
        parts = ", ".join(f"{k} {v:.2f}" for k, v in factors.items())
        out.print(
            f"Host work per class scaled to the phases of the steps measured without tracing ({parts}): the "
            "tracer slows the host unevenly, and the GPU not at all."
        )
    elif f0.calibration is CalibrationBasis.NONE:
        out.print(
            "Every step was traced: no step measured without the tracer calibrates the host's work, so these "
            "predictions carry the tracer's overhead (at most MEDIUM)."
        )
    elif abs(f0.host_factor - 1.0) > 0.02:
        out.print(
            f"Host work scaled by {f0.host_factor:.2f} so the replay matches the steps measured without "
            "tracing (the tracer slows the host, not the GPU)."
        )
