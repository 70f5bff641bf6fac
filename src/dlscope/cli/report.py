"""Write a profile's HTML report: one self-contained file to open anywhere or share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from .base import Command
from .common import add_selection, open_for_analysis, selection_from


class ReportCommand(Command):
    """Write a profile's HTML report: one self-contained file to open anywhere or share.

    dlscope report PATH [-o report.html]. The page holds the summary, the step-time
    distribution, phases per step, GPU busy and hardware counters over time with the phases
    shaded, top kernels and ops, the tensor-core share, the advice findings and the capture
    settings. It loads nothing from the network and runs no script.
    """

    name = "report"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory")
        parser.add_argument("-o", "--output", metavar="FILE.html", help="the report (default: NAME.report.html)")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing file")
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        stem = Path(args.profile.rstrip("/")).name.removesuffix(".dlscope") or "profile"
        out = Path(args.output) if args.output else Path(f"{stem}.report.html")
        if out.suffix.lower() not in (".html", ".htm"):
            raise UsageError(f"{out}: the report is written as .html")
        if out.exists() and not args.force:
            raise UsageError(f"{out} exists (use -f to overwrite)")
        from ..application.report import build_report
        from ..render.html import write_report
        from ..render.progress import progress

        data = open_for_analysis(args.profile, selection_from(args))
        with progress("writing report") as bar:
            size = write_report(build_report(data, bar), out, bar)
        print(f"dlscope: report written to {out} ({size / 1e3:,.0f} kB; opens offline in any browser)", file=sys.stderr)
        return 0
