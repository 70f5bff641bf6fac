"""The expert system: rules that name a bottleneck, show the evidence and bound the gain.

``RULES`` is the one registry: a rule is a module with a :class:`~.rule.Rule` subclass and a
``RULE`` instance, plus one line here. :func:`evaluate` runs every rule that can run on a profile
and returns its findings, largest saving first; :func:`run` also says why the others could not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..analysis.core.context import ProfileData
from ..vocabulary.names import RuleId
from . import (
    alternatives,
    amp_not_enabled,
    below_roofline,
    comm_exposed,
    fsdp_exposed_gathers,
    fusion_candidates,
    gpu_idle,
    h2d_not_overlapped,
    high_step_variance,
    input_bound,
    kernel_bound,
    launch_bound,
    layout_transposes,
    memory_near_limit,
    memory_underused,
    no_tensor_cores,
    pageable_memcpy,
    severity_basis,
    small_collectives,
    straggler,
    sync_in_step,
    throttling,
    unfused_optimizer,
)
from .context import Context
from .finding import KEYS, SEVERITIES, Evidence, Finding
from .rule import Rule
from .what_if import apply as apply_what_if

RULES: list[Rule] = [
    gpu_idle.RULE,
    input_bound.RULE,
    launch_bound.RULE,
    pageable_memcpy.RULE,
    h2d_not_overlapped.RULE,
    sync_in_step.RULE,
    no_tensor_cores.RULE,
    amp_not_enabled.RULE,
    layout_transposes.RULE,
    kernel_bound.RULE,
    below_roofline.RULE,
    fusion_candidates.RULE,
    unfused_optimizer.RULE,
    memory_underused.RULE,
    memory_near_limit.RULE,
    high_step_variance.RULE,
    straggler.RULE,
    comm_exposed.RULE,
    fsdp_exposed_gathers.RULE,
    small_collectives.RULE,
    throttling.RULE,
]


@dataclass
class AdviceRun:
    """Everything one evaluation produced: the findings (sorted), the rules that could not run
    and why, and the rules that ran and found nothing."""

    findings: list[Finding] = field(default_factory=list)
    skipped: dict[RuleId, str] = field(default_factory=dict)
    clean: list[RuleId] = field(default_factory=list)

    def to_record(self) -> dict[str, Any]:
        """JSON-ready, for :meth:`from_record` (the results cache)."""
        return {"findings": [f.to_record() for f in self.findings], "skipped": self.skipped, "clean": self.clean}

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> AdviceRun:
        return cls(
            [Finding.from_record(f) for f in d["findings"]],
            {RuleId(k): v for k, v in d["skipped"].items()},
            [RuleId(r) for r in d["clean"]],
        )


def run(data: ProfileData, rules: list[Rule] | None = None) -> AdviceRun:
    """Run ``rules`` (all of :data:`RULES` by default) on ``data``."""
    ctx = Context(data)
    out = AdviceRun()
    chosen = rules if rules is not None else RULES
    for rule in chosen:
        rule.prefetch(data)
    try:
        for rule in chosen:
            why = rule.missing(data, ctx)
            if why:
                out.skipped[rule.id] = why
                continue
            f = rule.check(ctx)
            if f is None:
                out.clean.append(rule.id)
            else:
                out.findings.append(f)
    finally:
        data.cancel_prefetches()  # what a rule that could not run would have read
    out.findings = apply_what_if(ctx, out.findings, {r.id: r for r in chosen})
    out.findings = severity_basis.apply(ctx, out.findings)
    out.findings = alternatives.explain(out.findings)
    return out


def evaluate(data: ProfileData) -> list[Finding]:
    """The findings of every rule on ``data``, largest estimated saving first."""
    return run(data).findings


__all__ = ["KEYS", "RULES", "SEVERITIES", "AdviceRun", "Evidence", "Finding", "Rule", "evaluate", "run"]
