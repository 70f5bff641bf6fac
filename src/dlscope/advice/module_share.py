"""Where a finding's time sits among the model's modules, in words ('78% of it in
`GPT.transformer.h.*.mlp`'), from the module split the analysis measured
(:class:`dlscope.analysis.measures.modules.ModuleSplit`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.measures.modules import ModuleSplit

# a module "holds" the time when at least this share of it lies in its subtree: then the deepest
# such module is named (a majority says where to look; below it the largest part is named instead)
HOLDS_PCT = 50.0


def where_it_sits(split: ModuleSplit | None) -> str | None:
    """'78% of it in `h.*.mlp`', naming the deepest module (below the root models) whose subtree
    holds at least :data:`HOLDS_PCT` of the time, else the largest part; None without module data
    or when no module below a root holds any of it."""
    if split is None:
        return None
    below_roots = [s for s in split.shares if "." in s.module]
    if not below_roots:
        return None
    holding = [s for s in below_roots if s.pct >= HOLDS_PCT]
    if holding:
        best = max(holding, key=lambda s: (s.module.count("."), s.pct))
        return f"{best.pct:.0f}% of it in `{best.module}`"
    best = max(below_roots, key=lambda s: s.pct)
    return f"the largest part, {best.pct:.0f}%, in `{best.module}`"
