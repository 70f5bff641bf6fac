"""Fail CI when a profile regressed against a baseline: exit 1 on a significant regression."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..errors import InputError, UsageError
from .base import Command
from .common import add_selection, selection_from

SUMMARY_MAX_BYTES = 50_000_000  # a summary is a few kB; larger JSON files are traces


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


class CheckCommand(Command):
    """Fail CI when a profile regressed against a baseline: exit 1 on a significant regression.

    dlscope check PROFILE --baseline BASE [--max-regression 5%] [--metric step_p50,...]. BASE is
    a profile, a trace, or the JSON of 'dlscope summary BASE --format json'. A metric regresses
    when it is worse by more than --max-regression and the change is significant (two profiles:
    Mann-Whitney U and a bootstrap interval of the change; a summary: the baseline's value lies
    outside this profile's bootstrap interval). One line per metric; exit 0 when none regressed,
    1 when one did, 2 on bad input. Metrics: step_p50 (default), step_p95, step_p99, step_mean,
    throughput, mem_peak.
    """

    name = "check"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..analysis.compare.baseline import DEFAULT_METRICS, METRICS

        parser.add_argument("profile", help="the profile (or trace) to check")
        parser.add_argument("--baseline", required=True, metavar="BASE",
                            help="a profile, a trace, or a 'dlscope summary --format json' file")
        parser.add_argument("--max-regression", default="5%", metavar="PCT",
                            help="allowed worsening, in percent (default 5%%)")
        parser.add_argument("--metric", default=",".join(DEFAULT_METRICS), metavar="M[,M]",
                            help=f"metrics to check: {', '.join(METRICS)} (default {','.join(DEFAULT_METRICS)})")
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..analysis.compare.baseline import check, from_profile, from_summary
        from ..application.open import open_any

        limit = parse_limit(args.max_regression)
        metrics = parse_metrics(args.metric)
        sel = selection_from(args)
        with contextlib.ExitStack() as stack:
            base_path = Path(args.baseline)
            if not base_path.exists():
                raise InputError(f"{base_path}: no such baseline")
            doc = read_summary(base_path)
            if doc is not None:
                base = from_summary(doc, str(base_path))
            else:
                data_b, name_b = open_any(args.baseline, stack, sel, args.key_node)
                base = from_profile(data_b, name_b)
            data, _ = open_any(args.profile, stack, sel, args.key_node)
            verdicts = check(data, base, metrics, limit)
        regressed = any(v.regressed for v in verdicts)
        if args.format == "json":
            sys.stdout.write(json.dumps({"regressed": regressed, "baseline": base.name,
                                         "metrics": [v.as_dict() for v in verdicts]}, indent=1) + "\n")
        else:
            for v in verdicts:
                print(v.line())
        return 1 if regressed else 0
