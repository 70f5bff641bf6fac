"""Run a program under the profiler and show its summary."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from .base import Command

if TYPE_CHECKING:
    from ..analysis.core.context import ProfileData


def default_output(cmd: list[str]) -> Path:
    """``train.py`` -> ``train.dlscope``, then ``train-1.dlscope``... never overwriting."""
    script = next((a for a in cmd if a.endswith(".py")), Path(cmd[0]).name)
    stem = Path(script).stem or "profile"
    p = Path(f"{stem}.dlscope")
    i = 1
    while p.exists():
        p = Path(f"{stem}-{i}.dlscope")
        i += 1
    return p


class ProfileCommand(Command):
    """Run a program under the profiler and show its summary.

    dlscope profile [-o PATH] [--steps A:B] [--batch-size N] -- CMD [ARGS...]
    The program's exit code is passed through (128+N when killed by signal N). Every Python
    process of the command records itself; a program that never calls dlscope still gets a
    profile of its whole run.
    """

    without_pandas = False  # runs the user's program

    name = "profile"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-o", "--output", metavar="PATH", help="profile directory (default: SCRIPT.dlscope)")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing profile")
        parser.add_argument("--steps", metavar="A:B", help="record only steps A to B (inclusive)")
        parser.add_argument(
            "--warmup",
            type=int,
            metavar="N",
            help="flag the first N recorded steps as warm-up (default 1, or 0 with --steps)",
        )
        parser.add_argument("--batch-size", type=int, metavar="N", help="samples per step, for samples/s")
        parser.add_argument(
            "--mode",
            choices=("default", "full"),
            default="default",
            help=(
                "'default' traces ops and kernels for a few steps after warm-up and times the "
                "rest untraced; 'full' traces every step with input shapes and memory events "
                "(Python stacks are not recorded)"
            ),
        )
        parser.add_argument(
            "--detail-steps", type=int, metavar="N", help="steps to trace in detail after warm-up (default 5; 0: none)"
        )
        parser.add_argument("--torch", choices=("auto", "on", "off"), default="auto", help="PyTorch layer")
        parser.add_argument("--nvml", choices=("auto", "on", "off"), default="auto", help="GPU counter sampler")
        parser.add_argument(
            "--cupti",
            choices=("auto", "on", "off"),
            default="auto",
            help="CUPTI tracing for CUDA programs that do not use PyTorch",
        )
        parser.add_argument(
            "--jax",
            choices=("auto", "off"),
            default="auto",
            help="JAX layer: ops, kernels and steps through jax.profiler",
        )
        parser.add_argument(
            "--tf",
            choices=("auto", "off"),
            default="auto",
            dest="tensorflow",
            help="TensorFlow layer: ops, kernels and steps through tf.profiler",
        )
        parser.add_argument("--nvtx", action="store_true", help="also emit phases and steps as NVTX ranges")
        parser.add_argument("--key-node", metavar="NAME", help="a range or op that marks one iteration")
        parser.add_argument(
            "-q", "--quiet", action="store_true", help="no live status line while the program runs, no summary after it"
        )
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    def run(self, args: argparse.Namespace) -> int:
        from ..application.profile import live_line_wanted, profile_program, program_command, step_window
        from ..capture.base import Settings

        cmd = program_command(list(args.command))
        if args.batch_size is not None and args.batch_size <= 0:
            raise UsageError("--batch-size must be positive")
        if args.detail_steps is not None and args.detail_steps < 0:
            raise UsageError("--detail-steps must be >= 0")
        window = step_window(args.steps) if args.steps else None
        out = Path(args.output) if args.output else default_output(cmd)
        if out.exists():
            if not args.force:
                raise UsageError(f"{out} exists (use -f to overwrite, or -o to choose another path)")
            shutil.rmtree(out)
        settings = Settings(
            batch_size=args.batch_size,
            steps=window,
            warmup=args.warmup,
            mode=args.mode,
            detail_steps=args.detail_steps,
            torch=args.torch,
            nvml=args.nvml,
            cupti=args.cupti,
            nvtx=args.nvtx,
            jax=args.jax,
            tensorflow=args.tensorflow,
            key_node=args.key_node,
        )
        # the live line: on a terminal only, and never with --quiet
        settings.live = not args.quiet and live_line_wanted()
        settings.quiet = bool(args.quiet)  # so that meta.json says who turned the live line off
        run = profile_program(cmd, out, settings)
        from ..analysis.core.context import ProfileData
        from ..application.summary import summarize
        from ..render.terminal import console, render_summary

        if run.finalize_error is not None:
            console(stderr=True).print(
                f"dlscope: could not finalize the profile: {run.finalize_error}; the recording is kept in {out}"
            )
            return run.exit_status or 2
        if not args.quiet:
            data = ProfileData.open(out)
            summary = summarize(data)
            render_summary(summary, console())
            if summary.failure is None:  # rules judge steps; a program that never ran one has none
                _top_advice(data, out)
        print(f"dlscope: profile written to {out} (the program {run.how})", file=sys.stderr)
        return run.exit_status


def _top_advice(data: ProfileData, path: Path) -> None:
    """The summary's advice block. A failing rule is a dlscope bug, but here it must not hide
    the program's exit code or the profile just written: it is reported on stderr instead."""
    from ..application.advise import advise
    from ..render.findings import render_top_findings

    try:
        findings = advise(data).findings
    except Exception as e:  # noqa: BLE001 - see the docstring
        print(
            f"dlscope: internal error in the advice rules: {e.__class__.__name__}: {e} (a dlscope bug; "
            f"the profile in {path} is complete)",
            file=sys.stderr,
        )
        return
    from ..render.terminal import console

    render_top_findings(findings, console(), str(path))
