"""Compare two profiles: what changed the step time, by how much, and whether it is significant."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from ..errors import UsageError
from .base import Command
from .common import add_selection, selection_from


class DiffCommand(Command):
    """Compare two profiles: what changed the step time, by how much, and whether it is significant.

    dlscope diff A B [--format text|json|html] [-o FILE]. A is the baseline (before), B the
    change (after). Either may be a profile or a trace dlscope imports (Kineto JSON, an nsys
    SQLite export, a trace folder), read into a temporary profile. Shows the step-time median,
    P95, P99 and mean with a bootstrap interval of each change and a Mann-Whitney test; the
    throughput (1000 / mean step ms, as in summary; samples/s when both batch sizes are known);
    the change of the mean step time split
    into rows that add up to it (GPU busy time by kernel, GPU idle time by cause); phases, ops and
    kernels matched by name (and kernels through their launching op), with what is new and what
    vanished; the GPU time breakdown, memory peak and counters; advice found in only one.
    """

    name = "diff"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("a", metavar="A", help="the baseline: a NAME.dlscope profile or a trace")
        parser.add_argument("b", metavar="B", help="the profile to compare with it")
        parser.add_argument("--format", choices=("text", "json", "html"), default="text", help="output format")
        parser.add_argument("-o", "--output", metavar="FILE", help="write to FILE (html: default diff.html)")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing output file")
        parser.add_argument("--top", type=int, default=12, metavar="N", help="rows per table in text (default 12)")
        parser.add_argument("--no-advice", action="store_true", help="skip comparing the advice (faster)")
        add_selection(parser)

    def run(self, args: argparse.Namespace) -> int:
        from ..application.diff import diff
        from ..application.open import open_any
        from ..render.diff_text import render_diff
        from ..render.terminal import console

        if args.top < 1:
            raise UsageError(f"--top {args.top}: give a positive number of rows")
        out_path = Path(args.output) if args.output else (Path("diff.html") if args.format == "html" else None)
        if out_path is not None:
            if out_path.exists() and not args.force:
                raise UsageError(f"{out_path} exists (use -f to overwrite)")
            if args.format == "html" and out_path.suffix.lower() not in (".html", ".htm"):
                raise UsageError(f"{out_path}: the HTML diff is written as .html")
        sel = selection_from(args)
        with contextlib.ExitStack() as stack:
            a, name_a = open_any(args.a, stack, sel, args.key_node)
            b, name_b = open_any(args.b, stack, sel, args.key_node)
            d = diff(a, b, names=(name_a, name_b), with_advice=not args.no_advice)
        if args.format == "html":
            from ..render.html.diff import write_diff

            assert out_path is not None
            size = write_diff(d, d.advice, out_path)
            print(
                f"dlscope: diff written to {out_path} ({size / 1e3:,.0f} kB; opens offline in any browser)",
                file=sys.stderr,
            )
            return 0
        if args.format == "json":
            text = json.dumps(d.as_dict(), indent=1, default=str) + "\n"
            if out_path is not None:
                out_path.write_text(text, encoding="utf-8")
            else:
                sys.stdout.write(text)
            return 0
        if out_path is not None:
            with out_path.open("w", encoding="utf-8") as f:
                from rich.console import Console

                render_diff(d, d.advice, Console(file=f, width=160, color_system=None, highlight=False), args.top)
        else:
            render_diff(d, d.advice, console(), args.top)
        return 0
