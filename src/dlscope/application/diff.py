"""The diff use case: what changed from profile A (before) to profile B (after), measured by
``analysis.compare`` and judged by the advice of each side (``application.advise``).

Analysis measures the differences only; the comparison of the two profiles' findings (what B no
longer has, what is new in B, what both have) is added here, where layers meet.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..analysis.compare.diff import ProfileDiff

if TYPE_CHECKING:
    from ..advice.finding import Finding
    from ..analysis.core.context import ProfileData


@dataclass
class Diff(ProfileDiff):
    """``dlscope diff``'s result: the measured differences and ``advice``, the findings found in A
    only (``resolved``), in B only (``new``) and in both; empty when the advice was not compared."""

    advice: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in super().as_dict().items():
            if key == "samples_ms":  # the advice sits where the JSON has always had it
                out["advice"] = self.advice
            out[key] = value
        return out


def diff(a: ProfileData, b: ProfileData, names: tuple[str, str] | None = None, with_advice: bool = True) -> Diff:
    """Compare profile ``a`` (the baseline) with ``b``; ``names``: what to call them (default: their
    paths); ``with_advice``: also evaluate and compare both profiles' advice (the slow part)."""
    from ..analysis.compare.diff import compare
    from .advise import advise

    measured = compare(a, b, names=names)
    found = _compare_findings(advise(a).findings, advise(b).findings) if with_advice else {}
    return Diff(**{f.name: getattr(measured, f.name) for f in dataclasses.fields(measured)}, advice=found)


def _compare_findings(a: list[Finding], b: list[Finding]) -> dict[str, list[dict[str, Any]]]:
    fa = {f.id: f for f in a}
    fb = {f.id: f for f in b}

    def row(f: Finding, other: Finding | None = None) -> dict[str, Any]:
        return {
            "id": f.id,
            "title": f.title,
            "severity": f.severity,
            "saving_ms_a": other.saving_ms_per_step if other else None,
            "saving_ms": f.saving_ms_per_step,
            "evidence": f.evidence.text,
        }

    return {
        "resolved": [row(f) for i, f in fa.items() if i not in fb],  # found in A only
        "new": [row(f) for i, f in fb.items() if i not in fa],  # found in B only
        "both": [row(fb[i], fa[i]) for i in fa if i in fb],
    }
