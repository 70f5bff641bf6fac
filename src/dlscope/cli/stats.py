"""Print one or more reports (nsys-style summaries and dlscope's own)."""

from __future__ import annotations

import argparse
import json

from ..errors import UsageError
from .base import Command
from .common import add_format, add_selection, open_for_analysis, selection_from


def _all_reports() -> list[str]:
    from ..application.stats import all_report_names

    return all_report_names()


class StatsCommand(Command):
    """Print one or more reports (nsys-style summaries and dlscope's own).

    dlscope stats PATH --report NAME[,NAME...] [--format table|csv|json]. 'all' runs every
    report that the profile has data for. Reports that cannot run on this profile say why.
    """

    name = "stats"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory")
        parser.add_argument(
            "--report",
            "-r",
            default="all",
            metavar="NAME[,NAME...]",
            help="reports to print (default: all): " + ", ".join(_all_reports()),
        )
        add_format(parser)
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.stats import report_names, run_reports
        from ..render.tables import render, to_json
        from ..render.terminal import console

        names = report_names(args.report)
        data = open_for_analysis(args.profile, selection_from(args))
        out = console()
        ran = run_reports(data, names)
        results, skipped = ran.results, ran.skipped
        if len(names) == 1 and skipped:
            raise UsageError(f"report {names[0]} cannot run on {args.profile}: {skipped[names[0]]}")
        if args.format == "json":
            payload = {r.name: json.loads(to_json(r.table)) for r in results}
            payload.update({n: {"skipped": why} for n, why in skipped.items()})
            out.file.write(json.dumps(payload if len(names) > 1 else payload[names[0]], indent=1) + "\n")
            return 0
        for i, r in enumerate(results):
            if args.format == "table":
                if i:
                    out.print()
                out.print(f"[bold]{r.name}[/bold]: {r.title}")
            elif len(results) > 1:
                out.file.write(("\n" if i else "") + f"# {r.name}\n")
            render(r.table, args.format, out, formats=r.formats)
            if args.format == "table":
                for note in r.notes:
                    out.print(f"  note: {note}")
        if args.format == "table":
            for n, why in skipped.items():
                out.print(f"\n[bold]{n}[/bold]: skipped ({why})")
        return 0
