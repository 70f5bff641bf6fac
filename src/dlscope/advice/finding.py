"""What a rule returns: a finding with its evidence, its estimated saving and the advice."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..analysis.models.replay import CalibrationBasis
from ..vocabulary.names import FixName, RuleId
from ..vocabulary.severity import SEVERITIES, Severity

__all__ = ["KEYS", "SEVERITIES", "Evidence", "Finding", "Severity", "WhatIf", "cap_severity", "severity_for"]


# Severity from the estimated saving, in % of the mean step time. 20% and 5% are XProf's lines
# between a "highly" and a "moderately" input-bound program (input_pipeline_analysis.cc:
# kHighlyInfeedBoundThresholdInPercent, kModeratelyInfeedBoundThresholdInPercent), applied to
# every cause; above half of every step the problem *is* the step (dlscope's own line).
CRITICAL_PCT = 50.0
HIGH_PCT = 20.0
MEDIUM_PCT = 5.0

# The keys of a finding in JSON (``dlscope advise --format json``, ``dlscope summary``'s ``advice``).
KEYS = (
    "id",
    "title",
    "severity",
    "evidence",
    "saving_ms_per_step",
    "saving_pct",
    "advice",
    "url",
    "bound_ms_per_step",
    "what_if",
    "try",
    "alternatives",
    "alternatives_note",
)


def severity_for(saving_pct: float | None) -> Severity:
    """The severity of a finding that could save ``saving_pct`` % of each step."""
    if saving_pct is None or saving_pct <= 0:
        return Severity.INFO
    if saving_pct >= CRITICAL_PCT:
        return Severity.CRITICAL
    if saving_pct >= HIGH_PCT:
        return Severity.HIGH
    if saving_pct >= MEDIUM_PCT:
        return Severity.MEDIUM
    return Severity.LOW


def cap_severity(severity: Severity, cap: Severity) -> Severity:
    """``severity``, lowered to ``cap`` when it is above it (a finding without a measured basis)."""
    return severity.at_most(cap)


@dataclass
class Evidence:
    """The measurements behind a finding.

    ``text``: one line with the numbers; ``saving``: one line saying how the saving was bounded;
    ``rows``: the top offenders (phases, ops, kernels, calls, steps), each a flat dict with the
    step numbers it was seen in, for tables in the terminal, the HTML report and JSON."""

    text: str
    saving: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "saving": self.saving, "rows": self.rows}


@dataclass
class WhatIf:
    """What the replay predicts for a finding's fix (:mod:`.what_if`): the step now and with the
    fix alone, then the step after the fixes ranked above it, without and with this one. Times in
    ms per step of today's batch (``per_sample``: the fix changes the batch, and the fixed time is
    per today's batch's worth of samples)."""

    step_ms: float
    fixed_step_ms: float
    per_sample: bool
    host_factor: float  # one factor over all host work (profiles without hook phases)
    host_factors: dict[str, float]  # host class -> factor, when calibrated per class
    calibration: CalibrationBasis  # what the replay's host work was scaled to
    after_above_ms: float | None = None
    after_above_fixed_ms: float | None = None
    saving_after_above_ms: float = 0.0
    fixed_above: list[RuleId] = field(default_factory=list)

    @property
    def saving_ms(self) -> float:
        return self.step_ms - self.fixed_step_ms

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the calibration by its name in lower case ('per_class', 'step_time', 'none')."""
        return {**asdict(self), "calibration": self.calibration.name.lower()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WhatIf:
        """From :meth:`as_dict`'s JSON (``dlscope advise --format json``)."""
        names = cls.__dataclass_fields__
        fields = {k: v for k, v in d.items() if k in names}
        fields["calibration"] = CalibrationBasis[str(d.get("calibration", "none")).upper()]
        fields["fixed_above"] = [RuleId(r) for r in d.get("fixed_above", [])]
        return cls(**fields)


@dataclass
class Finding:
    """One problem found in a profile.

    ``saving_ms_per_step`` and ``saving_pct``: the predicted saving of the fix, from the
    critical-path replay of the traced steps where the rule has a what-if (see
    :mod:`.what_if`; ``what_if`` then holds the step times now, after this fix alone and after
    it and the findings ranked above it), else the rule's own upper bound. ``bound_ms_per_step``
    is always the rule's own bound (``evidence.saving`` says why). ``saving_ms_per_step`` is None
    in a profile without steps, where ``saving_pct`` is a share of the analysed wall time.
    ``symptom``: the finding describes an effect (idle GPU, uneven steps) whose causes have
    findings of their own; it ranks after them."""

    id: RuleId
    title: str
    severity: Severity
    evidence: Evidence
    saving_ms_per_step: float | None
    saving_pct: float | None
    advice: str
    url: str
    bound_ms_per_step: float | None = None
    bound_pct: float | None = None
    what_if: WhatIf | None = None
    symptom: bool = False
    alternative_of: RuleId | None = None  # another finding's fix includes this one's
    # the findings whose fixes are alternatives to this one's (.alternatives: pick one), in the order shown,
    # the line that says so, and what this finding's change is in a few words (for that line)
    alternatives: list[RuleId] = field(default_factory=list)
    alternatives_note: str | None = None
    choice: str = ""
    negligible: bool = False  # its fix saves under the floor now and after the fixes above (ranks last)
    untraced: bool = False  # judged from steps measured without the tracer (step times, NVML, hook phases)
    confirmed: bool = True  # False: judged from traced steps that the untraced ones do not confirm (at most LOW)
    # how `dlscope try` tests the finding: the fixes it injects for it, or why no run can
    try_fixes: list[FixName] = field(default_factory=list)
    try_none: str | None = None

    def __post_init__(self) -> None:
        if self.bound_ms_per_step is None and self.bound_pct is None:
            self.bound_ms_per_step, self.bound_pct = self.saving_ms_per_step, self.saving_pct

    def as_dict(self) -> dict[str, Any]:
        """Exactly :data:`KEYS`, JSON-ready."""
        return {
            "id": self.id,
            "title": self.title,
            "severity": self.severity,
            "evidence": self.evidence.as_dict(),
            "saving_ms_per_step": self.saving_ms_per_step,
            "saving_pct": self.saving_pct,
            "advice": self.advice,
            "url": self.url,
            "bound_ms_per_step": self.bound_ms_per_step,
            "what_if": self.what_if.as_dict() if self.what_if is not None else None,
            "try": {"fixes": self.try_fixes, "why_none": self.try_none},
            "alternatives": self.alternatives,
            "alternatives_note": self.alternatives_note,
        }

    def to_record(self) -> dict[str, Any]:
        """Every field, JSON-ready, for :meth:`from_record` (the results cache; ``as_dict`` is the
        public JSON, which leaves the ranking's fields out)."""
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["evidence"] = self.evidence.as_dict()
        d["what_if"] = self.what_if.as_dict() if self.what_if is not None else None
        d["severity"] = self.severity.value
        return d

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Finding:
        """The finding :meth:`to_record` wrote."""
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        fields["id"] = RuleId(d["id"])
        fields["severity"] = Severity(d["severity"])
        if d.get("alternative_of") is not None:
            fields["alternative_of"] = RuleId(d["alternative_of"])
        fields["try_fixes"] = [FixName(n) for n in d.get("try_fixes", [])]
        fields["alternatives"] = [RuleId(r) for r in d.get("alternatives", [])]
        fields["evidence"] = Evidence(**d["evidence"])
        fields["what_if"] = WhatIf.from_dict(d["what_if"]) if d.get("what_if") is not None else None
        return cls(**fields)

    def sort_key(self) -> tuple[int, float, int, RuleId]:
        """Causes first, then symptoms, and causes whose fix would hardly show (negligible); within
        each, the largest saving first; severity breaks ties, then the id (a stable order).
        :func:`.alternatives.ranked` then puts each group of alternatives together."""
        group = 2 if self.negligible else 1 if self.symptom else 0
        return (group, -(self.saving_pct if self.saving_pct is not None else -1.0), self.severity.rank, self.id)
