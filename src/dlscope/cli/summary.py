"""Show a profile's summary: steps, phases, and which layers were captured."""

from __future__ import annotations

import argparse
import json

from .base import Command
from .common import add_selection, open_for_analysis, selection_from


class SummaryCommand(Command):
    """Show a profile's summary: steps, phases, which layers were captured, and the top advice.

    Statistics cover the selected steps (warm-up excluded by default). A recording left by a
    killed program is finalized first. The three largest findings of the expert system close the
    text (dlscope advise shows them all with their evidence); JSON holds them all under 'advice'.
    """

    name = "summary"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory")
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.summary import summary_with_advice
        from ..render.findings import render_top_findings
        from ..render.terminal import console, render_summary

        data = open_for_analysis(args.profile, selection_from(args))
        # a program that failed before its first step gets that said, and no rules (they judge steps)
        view = summary_with_advice(data)
        out = console()
        if args.format == "json":
            out.file.write(json.dumps(view.as_dict(), indent=1, default=str) + "\n")
        else:
            render_summary(view.summary, out)
            if view.summary.failure is None:
                render_top_findings(view.findings, out, args.profile)
        return 0
