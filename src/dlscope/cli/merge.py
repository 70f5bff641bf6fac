"""Put the profiles of one job's hosts into one, on one clock."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UsageError
from .base import Command


class MergeCommand(Command):
    """Put the profiles of one job's hosts into one, on one clock.

    dlscope merge HOST_PROFILE HOST_PROFILE... -o JOB.dlscope
    Each host records its own ranks into its own profile, on its own clock. The clocks are aligned
    from the collectives the profiles share (a collective ends at one instant on every rank): each
    host's offset and drift against the profile holding the lowest rank, with the residual error
    printed and kept in the job's notes. The job's profile then works like a one-host job's.
    """

    name = "merge"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("profiles", nargs="+", metavar="HOST_PROFILE", help="one profile per host")
        parser.add_argument("-o", "--output", required=True, metavar="JOB", help="the merged profile")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing profile")

    def run(self, args: argparse.Namespace) -> int:
        from ..application.merge import merge_profiles
        from .common import open_for_analysis

        if len(args.profiles) < 2:
            raise UsageError("merge wants two or more host profiles")
        out = Path(args.output)
        if out.exists():
            if not args.force:
                raise UsageError(f"{out} exists (use -f to overwrite, or -o to choose another path)")
            import shutil

            shutil.rmtree(out)
        hosts = [open_for_analysis(p) for p in args.profiles]
        fits = merge_profiles(hosts, out)
        for path, fit in zip(args.profiles[1:], fits):
            print(
                f"dlscope: {path}: offset {fit.offset_ns / 1e6:+.3f} ms, drift {fit.drift_ppm:+.2f} ppm from "
                f"{fit.matched} shared collectives; residual max {fit.residual_max_ns / 1e3:.1f} us, "
                f"rms {fit.residual_rms_ns / 1e3:.1f} us",
                file=sys.stderr,
            )
        print(f"dlscope: job profile written to {out}", file=sys.stderr)
        return 0
