"""Fail CI when a profile regressed against a baseline: exit 1 on a significant regression."""

from __future__ import annotations

import argparse
import json
import sys

from .base import Command
from .common import add_selection, selection_from


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
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..application.check import metric_names

        metrics, defaults = metric_names()

        parser.add_argument("profile", help="the profile (or trace) to check")
        parser.add_argument(
            "--baseline",
            required=True,
            metavar="BASE",
            help="a profile, a trace, or a 'dlscope summary --format json' file",
        )
        parser.add_argument(
            "--max-regression", default="5%", metavar="PCT", help="allowed worsening, in percent (default 5%%)"
        )
        parser.add_argument(
            "--metric",
            default=",".join(defaults),
            metavar="M[,M]",
            help=f"metrics to check: {', '.join(metrics)} (default {','.join(defaults)})",
        )
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.check import check_against, parse_limit, parse_metrics

        result = check_against(
            args.profile,
            args.baseline,
            selection_from(args),
            args.key_node,
            parse_metrics(args.metric),
            parse_limit(args.max_regression),
        )
        if args.format == "json":
            sys.stdout.write(
                json.dumps(
                    {
                        "regressed": result.regressed,
                        "baseline": result.baseline,
                        "metrics": [v.as_dict() for v in result.verdicts],
                    },
                    indent=1,
                )
                + "\n"
            )
        else:
            for v in result.verdicts:
                print(v.line())
        return 1 if result.regressed else 0
