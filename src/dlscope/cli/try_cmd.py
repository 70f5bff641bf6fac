"""Measure what each advised fix saves: run the program unchanged and with each fix, alternated."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import UsageError
from .base import Command

DEFAULT_STEPS = 20


class TryCommand(Command):
    """Measure what each advised fix saves: run the program unchanged and with each fix, alternated.

    dlscope try [--fixes auto|NAME,...] [--steps N] [--max-rounds K | --repeat R] [--baseline PROFILE] [-o DIR]
    -- CMD [ARGS...]
    The first run is profiled (default mode) and advised; 'auto' tries the fixes its findings name.
    --baseline PROFILE takes the advice from a recent profile of the same command instead (refused
    when it was made from another command or has no steps): nothing is profiled, and round 1's
    baseline runs like every other round's (the profile's own steps, warmed up and traced otherwise,
    are not compared with the runs).
    Every fix is applied without changing the program's source (dlscope's bootstrap), each run is
    stopped after the warm-up and N measured steps, and the runs alternate in rounds (the unchanged
    program and each fix once a round). From the second round on, each fix gets a verdict as soon
    as its rounds decide it: "saves" or "costs" when the interval of its saving excludes zero, "no
    effect" when it lies within -5..+5%; a decided fix is not run again, and the rounds end when
    every fix has a verdict or after K rounds (default 8; the rest "undecided"). The interval and
    the p-value's level are corrected for looking after every round (alpha spending: a fix that
    does nothing is called a saving or a cost at most 5% of the time). --repeat R runs exactly R
    rounds instead, with one test at the end. Prints the verdict and the rounds it took, the
    measured saving of the median step with its interval and test next to the advice's
    prediction, then the fixes that saved, applied together. Profiles of every run go under DIR.
    """

    without_pandas = False  # runs the user's program
    name = "try"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from ..application.try_fixes import DEFAULT_MAX_ROUNDS, WARMUP_STEPS

        parser.add_argument(
            "--fixes",
            default="auto",
            metavar="auto|NAME,...",
            help="fixes to try (default auto: those the advice names on the first run)",
        )
        parser.add_argument(
            "--steps",
            type=int,
            default=DEFAULT_STEPS,
            metavar="N",
            help=f"measured steps per run, after {WARMUP_STEPS} warm-up steps (default {DEFAULT_STEPS})",
        )
        parser.add_argument(
            "--max-rounds",
            type=int,
            metavar="K",
            help=(
                "rounds at most: each fix stops as soon as its rounds decide it, the rest are "
                f"'undecided' after K (default {DEFAULT_MAX_ROUNDS})"
            ),
        )
        parser.add_argument(
            "--repeat",
            type=int,
            metavar="R",
            help="exactly R rounds, no early stop, one test at the end (instead of --max-rounds)",
        )
        parser.add_argument(
            "--gpus",
            default="auto",
            metavar="LIST",
            help="GPUs to run rounds on at the same time, one round per GPU (CUDA ordinals or UUIDs, e.g. 0,1); "
            "default auto: every visible idle GPU, for a program that is one process",
        )
        parser.add_argument(
            "--baseline",
            metavar="PROFILE",
            help="a recent profile of the same command (dlscope profile -- CMD): its advice chooses the fixes and "
            "predicts their savings, and the program is not profiled again (every baseline run is then unprofiled)",
        )
        parser.add_argument("-o", "--output", metavar="DIR", help="folder for the runs' profiles (default SCRIPT.try)")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing folder")
        parser.add_argument("--no-combined", action="store_true", help="do not measure the helpful fixes together")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    def run(self, args: argparse.Namespace) -> int:
        from ..application.profile import program_command
        from ..application.try_fixes import DEFAULT_MAX_ROUNDS, Trial, fix_names, given_advice
        from ..application.try_placement import parse_gpus, placements

        cmd = program_command(list(args.command))
        if args.steps < 3:
            raise UsageError("--steps must be at least 3 (a median of fewer steps says little)")
        if args.repeat is not None and args.repeat < 1:
            raise UsageError("--repeat must be at least 1")
        if args.repeat is not None and args.max_rounds is not None:
            raise UsageError("--repeat runs exactly R rounds, --max-rounds stops as fixes are decided: give one")
        if args.max_rounds is not None and args.max_rounds < 2:
            raise UsageError("--max-rounds must be at least 2 (a verdict needs the spread of two rounds)")
        asked = fix_names(args.fixes)
        given = given_advice(Path(args.baseline), cmd) if args.baseline else None  # refused before anything runs
        where = placements(cmd, parse_gpus(args.gpus))
        out = Path(args.output) if args.output else Path(f"{_stem(cmd)}.try")
        if out.exists():
            if not args.force:
                raise UsageError(f"{out} exists (use -f to overwrite, or -o to choose another folder)")
            import shutil

            shutil.rmtree(out)
        out.mkdir(parents=True)
        result = Trial(
            cmd,
            out,
            args.steps,
            args.repeat,
            asked,
            not args.no_combined,
            quiet=args.format == "json",
            max_rounds=args.max_rounds or DEFAULT_MAX_ROUNDS,
            placements=where,
            given=given,
        ).run()
        if args.format == "json":
            print(json.dumps(result, indent=1, default=str))
        return 130 if result["interrupted"] else 0  # the shell's code for Ctrl-C


def _stem(cmd: list[str]) -> str:
    script = next((a for a in cmd if a.endswith(".py")), Path(cmd[0]).name)
    return Path(script).stem or "program"
