"""Export a profile as a timeline (Perfetto / chrome://tracing) or as raw tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .base import Command


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def default_output(profile: str, kind: str) -> Path:
    stem = Path(profile.rstrip("/")).name.removesuffix(".dlscope") or "profile"
    return Path(f"{stem}.trace.json.gz" if kind == "perfetto" else f"{stem}-{kind}")


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


class ExportCommand(Command):
    """Export a profile as a timeline for Perfetto UI / chrome://tracing, or as CSV/Parquet tables.

    dlscope export PATH [--type perfetto|csv|parquet] [-o OUT] [--steps A:B] [--max-events N].
    The timeline (.json or .json.gz, Chrome trace format) has every layer on its own tracks:
    steps, phases, framework ops and CUDA API calls per thread, kernels/copies/sets per GPU
    stream, hardware counters, and an arrow from each launch to its GPU work; one process per
    rank's host and GPU. A timeline over 1,000,000 events or 256 MB is written in parts that each
    open on their own. csv and parquet write one file per table into the directory OUT.
    """

    name = "export"
    opens_profile = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..render.timeline import PART_BYTES, PART_EVENTS

        parser.add_argument("profile", help="a NAME.dlscope directory")
        parser.add_argument(
            "--type",
            "-t",
            choices=("perfetto", "csv", "parquet"),
            default="perfetto",
            help="perfetto: a Chrome-trace timeline (default); csv, parquet: the raw tables",
        )
        parser.add_argument(
            "-o",
            "--output",
            metavar="OUT",
            help=(
                "file (.json or .json.gz) for perfetto, directory for csv/parquet "
                "(default: NAME.trace.json.gz or NAME-csv/)"
            ),
        )
        parser.add_argument("-f", "--force", action="store_true", help="overwrite existing output")
        parser.add_argument("--steps", metavar="A:B", help="only steps A to B (inclusive)")
        parser.add_argument("--max-events", type=_positive, metavar="N", help="timeline: keep only the first N events")
        parser.add_argument(
            "--part-events",
            type=_positive,
            default=PART_EVENTS,
            metavar="N",
            help=f"timeline: most events per file (default {PART_EVENTS:,})",
        )
        parser.add_argument(
            "--part-mb",
            type=_positive,
            default=PART_BYTES // 1_000_000,
            metavar="MB",
            help=f"timeline: most uncompressed megabytes per file (default {PART_BYTES // 1_000_000})",
        )

    def run(self, args: argparse.Namespace) -> int:
        from ..application.export import damaged_tables_refused, export_window, open_for_export
        from ..render.timeline import split_suffix

        window = export_window(args.steps)
        out = Path(args.output) if args.output else default_output(args.profile, args.type)
        if args.type == "perfetto":
            split_suffix(out)
        elif args.max_events is not None:
            raise UsageError("--max-events applies to the perfetto timeline only")
        if out.exists() and not args.force:
            raise UsageError(f"{out} exists (use -f to overwrite)")
        if args.type != "perfetto" and out.exists() and not out.is_dir():
            raise UsageError(f"{out} is a file; --type {args.type} writes a directory of tables")
        data = open_for_export(args.profile)
        with damaged_tables_refused(data, out):
            return self._export(args, data, out, window)

    def _export(self, args: argparse.Namespace, data: Any, out: Path, window: Any) -> int:
        from ..render.progress import progress
        from ..render.timeline import TimelineOptions, export_timeline

        if args.type != "perfetto":
            from ..render.raw import export_tables

            with progress(f"exporting {args.type} tables"):
                files = export_tables(data, out, args.type, window)
            print(f"dlscope: wrote {len(files)} tables to {out}/ ({', '.join(f.name for f in files)})", file=sys.stderr)
            return 0
        opts = TimelineOptions(
            window=window, max_events=args.max_events, part_events=args.part_events, part_bytes=args.part_mb * 1_000_000
        )
        with progress("exporting timeline") as bar:
            opts.progress = bar
            res = export_timeline(data, out, opts)
        for note in res.notes:
            print(f"dlscope: note: {note}", file=sys.stderr)
        if len(res.files) > 1:
            print(
                f"dlscope: the timeline has {res.events:,} events ({_mb(res.bytes)} of JSON), more than one file "
                f"opens well: split into {len(res.files)} parts of at most {args.part_events:,} events and "
                f"{args.part_mb:,} MB each: {', '.join(str(f) for f in res.files)}",
                file=sys.stderr,
            )
        else:
            print(
                f"dlscope: timeline written to {out} ({res.events:,} events, {_mb(res.bytes)} of JSON); "
                "open it in https://ui.perfetto.dev or chrome://tracing",
                file=sys.stderr,
            )
        return 0
