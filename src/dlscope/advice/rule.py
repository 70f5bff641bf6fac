"""What a rule is: an id, a title, what data it needs, and ``check(ctx) -> Finding | None``.

After torch.profiler's ``_pattern_matcher``: each anti-pattern is a class with a name, a
description, a URL, a skip condition and a match. Here ``needs`` names the tables that must hold
rows, ``needs_steps``/``needs_gpu`` the step and GPU data the rule measures with, and
:meth:`Rule.precondition` anything else (a counter that was not sampled, a GPU without tensor
cores); :meth:`Rule.missing` turns them into the one line ``dlscope advise --verbose`` prints for a
rule that could not run. A rule that runs and finds nothing returns None.

A rule whose measures serve one kind of profile (memory counters, several ranks, module data,
ncu's metrics) imports them in the methods that use them, not at the top of its module: every
command imports every rule, and a command on a profile the rule does not apply to should not pay
for its measures' modules (a millisecond or more each; issue 37's speed gate).
"""

from __future__ import annotations

from typing import ClassVar

from ..analysis.core.context import ProfileData
from ..analysis.models.replay import Fix
from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding, severity_for

# The default floor of a finding: below 2% of the step a change is hard to tell from step-to-step
# variation, so rules without a published threshold of their own stay silent under it.
MIN_SAVING_PCT = 2.0


class Rule:
    id: ClassVar[RuleId]  # every rule names its own (vocabulary.names)
    title: ClassVar[str] = ""
    description: ClassVar[str] = ""  # what the rule looks for, one sentence
    url: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()
    needs_steps: ClassVar[bool] = False
    needs_gpu: ClassVar[bool] = False  # GPU work in the selected steps
    cuda_only: ClassVar[bool] = False  # judges CUDA/ROCm kernel names or runtime calls
    symptom: ClassVar[bool] = False  # an effect whose causes have rules of their own: ranks after them
    # a rule whose fix includes this one's: when both fire, this ranks after the causes
    alternative_to: ClassVar[RuleId | None] = None
    # why no `dlscope try` run can test this rule's finding, for rules no injected fix answers
    # (tests/test_try_links.py: every rule has a fix or this reason)
    no_try_fix: ClassVar[str] = ""
    judges_untraced: ClassVar[bool] = False  # judges from untraced steps only (step times, NVML): keeps its severity

    def missing(self, data: ProfileData, ctx: Context | None = None) -> str | None:
        """Why this rule cannot run on ``data``, or None."""
        empty = [t for t in self.needs if not data.has(t)]
        if empty:
            return f"the profile has no {', '.join(empty)} data"
        if self.needs_steps and not data.step_count():
            return "the profile has no steps (call prof.step() per iteration, or use --key-node)"
        ctx = ctx or Context(data)
        if self.needs_steps and not ctx.basis.stat_steps:
            return "no step is selected"
        if self.needs_gpu and not ctx.basis.windows:
            return "no GPU activity in the selected steps" + (
                " (GPU work is recorded only in the traced steps)" if data.traced_excluded else ""
            )
        dev = ctx.facts.device if self.cuda_only else None
        if dev is not None and dev.vendor == "other":
            return f"the device ({dev.name}) is not a CUDA or ROCm GPU: its kernels and calls are named otherwise"
        if self.cuda_only and ctx.facts.foreign_runtime:
            return (
                "the runtime calls are neither CUDA nor HIP: an accelerator whose kernels dlscope cannot judge by name"
            )
        return self.precondition(ctx)

    def prefetch(self, data: ProfileData) -> None:
        """Start, in the background, a measure this rule will read (:meth:`ProfileData.prefetch`):
        called for every rule before the first one runs. Nothing by default."""

    def precondition(self, ctx: Context) -> str | None:
        """A rule-specific reason not to run (checked after ``needs``), or None."""
        return None

    def check(self, ctx: Context) -> Finding | None:
        raise NotImplementedError

    def what_if(self, ctx: Context, finding: Finding) -> Fix | None:
        """The change this finding advises, as the replay applies it (:mod:`.what_if`), or None
        when the replay cannot model it (the finding keeps the rule's own bound)."""
        return None

    def untestable(self, finding: Finding) -> str | None:
        """Why the ``dlscope try`` fixes of this rule cannot test this finding, where its evidence names a
        cause they do not change (a sync no injected fix can defer), or None: they can."""
        return None

    def finding(
        self,
        ctx: Context,
        saving_ms: float,
        evidence: Evidence,
        advice: str,
        title: str | None = None,
        url: str | None = None,
    ) -> Finding:
        """A finding of this rule with its saving (ms per step, or per window without steps)
        turned into the fields of :class:`Finding`."""
        saving_ms = max(0.0, min(saving_ms, ctx.basis.unit_ms or saving_ms))
        pct = ctx.pct(saving_ms)
        return Finding(
            id=self.id,
            title=title or self.title,
            severity=severity_for(pct),
            evidence=evidence,
            saving_ms_per_step=saving_ms if ctx.basis.has_steps else None,
            saving_pct=pct,
            advice=advice,
            url=url or self.url,
            symptom=self.symptom,
            untraced=self.judges_untraced,
        )

    def per_step_phrase(self, ctx: Context) -> str:
        """'per step' or, without steps, 'over the profile'."""
        return "per step" if ctx.basis.has_steps else "over the profile"
