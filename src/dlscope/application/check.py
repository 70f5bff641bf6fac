"""The `check` use case: judge a profile against a baseline (a profile, a trace, or the JSON of
`dlscope summary`) metric by metric, for CI."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError

if TYPE_CHECKING:
    from ..analysis.compare.baseline import Verdict
    from ..analysis.core.context import Selection

SUMMARY_MAX_BYTES = 50_000_000  # a summary is a few kB; larger JSON files are traces


def metric_names() -> tuple[list[str], list[str]]:
    """The metrics `check` knows, and those it checks by default."""
    from ..analysis.compare.baseline import DEFAULT_METRICS, METRICS

    return list(METRICS), list(DEFAULT_METRICS)


def parse_limit(text: str) -> float:
    """'5%' or '5' -> 5.0 (percent)."""
    t = text.strip().removesuffix("%")
    try:
        v = float(t)
    except ValueError:
        raise UsageError(f"--max-regression {text!r}: give a percentage such as 5%") from None
    if not (0 <= v < 1e6):
        raise UsageError(f"--max-regression {text!r}: give a percentage of 0 or more")
    return v


def parse_metrics(text: str) -> list[str]:
    from ..analysis.compare.baseline import METRICS

    names = [m.strip() for m in text.split(",") if m.strip()]
    bad = [m for m in names if m not in METRICS]
    if bad or not names:
        raise UsageError(f"--metric {text!r}: choose from {', '.join(METRICS)}")
    return names


def read_summary(path: Path) -> Any | None:
    """The parsed summary JSON when ``path`` is one, else None (a trace or a profile)."""
    if not path.is_file() or path.suffix.lower() != ".json" or path.stat().st_size > SUMMARY_MAX_BYTES:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not valid JSON ({e.__class__.__name__})") from None
    if isinstance(doc, dict) and "traceEvents" in doc:
        return None  # a Kineto trace
    return doc


@dataclass
class CheckResult:
    """The baseline's name and one verdict per metric."""

    baseline: str
    verdicts: list[Verdict]

    @property
    def regressed(self) -> bool:
        return any(v.regressed for v in self.verdicts)


def check_against(
    profile: str, baseline: str, selection: Selection, key_node: str | None, metrics: list[str], limit_pct: float
) -> CheckResult:
    """``profile`` against ``baseline`` on ``metrics``, each allowed to worsen by ``limit_pct`` %."""
    from ..analysis.compare.baseline import check, from_profile, from_summary
    from .open import open_any

    with contextlib.ExitStack() as stack:
        base_path = Path(baseline)
        if not base_path.exists():
            raise InputError(f"{base_path}: no such baseline")
        doc = read_summary(base_path)
        if doc is not None:
            base = from_summary(doc, str(base_path))
        else:
            data_b, name_b = open_any(baseline, stack, selection, key_node)
            base = from_profile(data_b, name_b)
        data, _ = open_any(profile, stack, selection, key_node)
        return CheckResult(base.name, check(data, base, metrics, limit_pct))
