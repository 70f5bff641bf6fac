"""Name a profile's bottlenecks: the expert system's findings, with evidence and bounded savings."""

from __future__ import annotations

import argparse
import json
import sys

from .base import Command
from .common import add_selection, open_for_analysis, selection_from


class AdviseCommand(Command):
    """Name a profile's bottlenecks: findings with their evidence, estimated saving and the change to try.

    dlscope advise PATH [--format text|json] [--verbose] [--what-if]. Findings come largest saving
    first: the saving predicted by replaying the traced steps with the fix applied, calibrated on
    the untraced steps (or the rule's upper bound where no replay models the fix), and what each
    saves once the findings above it are fixed. Findings whose fixes are alternatives (TF32 or bf16
    autocast: pick one) are shown together where the most costly of them ranks, each with its saving
    alone, led by a line that says so. --what-if prints the predicted step time after
    each fix and after the chain of fixes. --verbose also lists the rules that found nothing and
    those that could not run, and why. JSON is a list of findings with the keys id, title,
    severity, evidence, saving_ms_per_step, saving_pct, advice, url, bound_ms_per_step, what_if, try, alternatives
    (the ids of the findings it is an alternative to) and alternatives_note.
    """

    name = "advise"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory")
        parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
        parser.add_argument(
            "-v", "--verbose", action="store_true", help="also list the rules that found nothing or could not run"
        )
        parser.add_argument(
            "--what-if",
            action="store_true",
            help="the predicted step time after each fix, and after it and the fixes above it",
        )
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.advise import advise
        from ..application.summary import job_end
        from ..render.findings import render_findings, render_what_if
        from ..render.terminal import console, render_job_end

        data = open_for_analysis(args.profile, selection_from(args))
        result = advise(data)
        ended = job_end(data)
        out = console()
        if ended is not None and args.format == "json":  # the JSON stays a list of findings
            sys.stderr.write(f"dlscope: {ended.line}\n")
        elif ended is not None:
            render_job_end(ended, out)
            out.print()
        if args.format == "json":
            out.file.write(json.dumps([f.as_dict() for f in result.findings], indent=1, default=str) + "\n")
            return 0
        if args.what_if:
            render_what_if(result.findings, out)
            return 0
        render_findings(result.findings, out)
        if args.verbose:
            out.print()
            if result.clean:
                out.print("[bold]No problem found by[/bold]: " + ", ".join(result.clean))
            for rule_id, why in result.skipped.items():
                out.print(f"[bold]{rule_id}[/bold] could not run: {why}", markup=True, highlight=False)
        elif result.skipped:
            out.print(
                f"\n{len(result.skipped)} rule{'s' if len(result.skipped) != 1 else ''} could not run on this "
                "profile (--verbose says why)."
            )
        return 0
