"""Alternatives: findings whose fixes are ways to the same end, of which the user picks one.

A rule names the rule whose fix includes its own (``Rule.alternative_to``: TF32 puts fp32 matrix
math on tensor cores, bf16 autocast does that and more). When both fire, the two are not steps of
one chain: applying one and then asking what the other still saves answers nothing the user will
do (issue 38: TF32, 55% of the step alone, was shown fifth, after a LOW finding, as "0.00 ms once
amp_not_enabled is fixed"). So the findings linked this way form a group that is ranked as one:

- the group sits where its most costly member would rank, and its members follow one another,
  largest saving alone first (:func:`ranked`);
- each member's what-if chain counts the fixes above the group, never another member's
  (:mod:`.what_if`); the findings below the group count every member's fix as done, as before
  the grouping (what is left after the fuller change);
- each member carries the others' ids and one line saying they are alternatives, their savings
  alone and what each change is (:func:`explain`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..vocabulary.names import RuleId
from .finding import Finding
from .rule import Rule


def link(findings: list[Finding], rules: Mapping[RuleId, Rule]) -> None:
    """Set ``alternative_of`` and ``alternatives`` (unordered until :func:`explain`) on the findings
    whose rules name each other as alternatives, when both fired."""
    present = {f.id for f in findings}
    edges: dict[RuleId, set[RuleId]] = {f.id: set() for f in findings}
    for f in findings:
        rule = rules.get(f.id)
        if rule is not None and rule.alternative_to is not None and rule.alternative_to in present:
            f.alternative_of = rule.alternative_to
            edges[f.id].add(rule.alternative_to)
            edges[rule.alternative_to].add(f.id)
    for f in findings:  # each finding's group: every finding reachable through the links
        seen, todo = {f.id}, [f.id]
        while todo:
            for other in edges[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        f.alternatives = sorted(seen - {f.id})


def _within(f: Finding) -> tuple[float, int, RuleId]:
    """A member's place in its group: the largest saving alone first."""
    return (-(f.saving_pct if f.saving_pct is not None else -1.0), f.severity.rank, f.id)


def ranked(findings: Iterable[Finding]) -> list[Finding]:
    """The findings in the order they are shown: by :meth:`Finding.sort_key`, each group of
    alternatives together at the place of its best-ranked member, largest saving alone first."""
    order = sorted(findings, key=Finding.sort_key)
    by_id = {f.id: f for f in order}
    out: list[Finding] = []
    placed: set[RuleId] = set()
    for f in order:
        if f.id in placed:
            continue
        group = sorted([f, *(by_id[a] for a in f.alternatives if a in by_id)], key=_within)
        out.extend(group)
        placed.update(g.id for g in group)
    return out


def explain(findings: list[Finding]) -> list[Finding]:
    """``findings`` ranked, each member of a group of alternatives with the others' ids in the order
    shown and the line that says what the choice is."""
    out = ranked(findings)
    for i, f in enumerate(out):
        if not f.alternatives or (i and out[i - 1].id in f.alternatives):
            continue  # not grouped, or not the group's first
        group = out[i : i + 1 + len(f.alternatives)]
        line = _line(group)
        for g in group:
            g.alternatives = [h.id for h in group if h is not g]
            g.alternatives_note = line
    return out


def _line(group: list[Finding]) -> str:
    """'Pick one (...): no_tensor_cores 55.4% (TF32: ...), amp_not_enabled 48.0% (bf16 autocast: ...).
    Their savings do not add up ...'"""
    parts = []
    for g in group:
        size = f" {g.saving_pct:.1f}%" if g.saving_pct is not None else ""
        parts.append(f"{g.id}{size}" + (f" ({g.choice})" if g.choice else ""))
    covers = [f"{g.alternative_of}'s change includes {g.id}'s" for g in group if g.alternative_of]
    # the findings below count every member's fix as done (:mod:`.what_if`): what is left after the
    # fuller change, whichever the user picks first
    done = [g.id for g in group if g.what_if is not None and not g.what_if.per_sample]
    return (
        f"Pick one (each saving is its fix alone, largest first): {', '.join(parts)}. "
        f"Their savings do not add up{' (' + '; '.join(covers) + ')' if covers else ''}: "
        + ("neither counts the other" if len(group) == 2 else "none counts another")
        + " as done"
        + (f", and the findings below count {' and '.join(done)} as done." if done else ".")
    )
