"""How much a finding matters: the five severities of the advice, most severe first."""

from __future__ import annotations

from .names import Name


class Severity(Name):
    """A finding's severity. A str enum: JSON and text show its value ("critical"), and it compares
    equal to that string, so profiles' and reports' JSON keep their form."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the most severe."""
        return SEVERITIES.index(self)

    def at_most(self, cap: Severity) -> Severity:
        """This severity, lowered to ``cap`` when it is above it."""
        return self if self.rank >= cap.rank else cap


SEVERITIES: tuple[Severity, ...] = tuple(Severity)
