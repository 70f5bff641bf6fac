"""Run Nsight Compute on the kernels that cost most in a profile and store its metrics there."""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from .base import Command, Parser

# the help's default; application/ncu.py holds the set (DEFAULT_SECTIONS), imported only when ncu runs
_SECTIONS_HELP = "SpeedOfLight, Occupancy, LaunchStats"


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--top", type=int, default=5, metavar="N", help="profile the N costliest kernels (5)")
    parser.add_argument(
        "--launch-skip", type=int, default=1, metavar="N", help="launches of each kernel to skip first (warm-up; 1)"
    )
    parser.add_argument("--launch-count", type=int, default=1, metavar="N", help="launches to measure (1)")
    parser.add_argument(
        "--section", action="append", metavar="NAME", help=f"ncu section, repeatable (default: {_SECTIONS_HELP})"
    )
    parser.add_argument(
        "--metrics",
        action="append",
        metavar="SPEC",
        help=(
            "ncu --metrics value, repeatable or comma-separated, passed to ncu as one list "
            "(default: DRAM bytes, FP instruction counts, tensor pipe)"
        ),
    )
    parser.add_argument("--ncu", metavar="PATH", help="the ncu executable (default: on PATH)")
    parser.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per-kernel limit (600 s)")


class NcuCommand(Command):
    """Run Nsight Compute on the kernels that cost most in a profile and store its metrics there.

    dlscope ncu PROFILE --top 5 -- CMD ... runs CMD once per chosen kernel under ncu, measuring
    just that kernel (a name filter, --launch-skip/--launch-count) with a chosen section set, and
    writes the metrics into the profile's kernel_metrics table (see 'dlscope stats --report
    kernel_metrics'). The kernels are the top ones by total time in PROFILE.
    """

    without_pandas = False  # runs the user's program

    name = "ncu"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profile", help="a NAME.dlscope directory with kernels")
        _options(parser)
        parser.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the program to run")

    def run(self, args: argparse.Namespace) -> int:
        cmd = list(args.cmd)
        # argparse hands options written after PROFILE to the remainder: parse them here
        # (argparse drops a '--' right after PROFILE: then the remainder is the command itself)
        split = cmd.index("--") if "--" in cmd else (len(cmd) if cmd[:1] and cmd[0].startswith("-") else -1)
        if split > 0:
            opts = Parser(prog="dlscope ncu", add_help=False)
            _options(opts)
            opts.parse_args(cmd[:split], namespace=args)
        cmd = cmd[split + 1 :]
        if not cmd:
            raise UsageError("ncu: give the program to run after --")
        if args.top < 1 or args.launch_count < 1 or args.launch_skip < 0:
            raise UsageError("ncu: --top and --launch-count must be >= 1, --launch-skip >= 0")

        from ..application.ncu import NcuOptions, measure_kernels

        options = NcuOptions(
            args.profile,
            cmd,
            args.top,
            args.launch_skip,
            args.launch_count,
            args.section,
            args.metrics,
            args.ncu,
            args.timeout,
        )
        stored = measure_kernels(options, lambda line: print(f"dlscope: {line}", file=sys.stderr))
        print(
            f"dlscope: stored {stored.rows} metric values of {stored.kernels} kernel(s) in {stored.path} "
            "(dlscope stats --report kernel_metrics)",
            file=sys.stderr,
        )
        return 0
