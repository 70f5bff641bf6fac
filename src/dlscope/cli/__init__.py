"""The command line: one module per command, registered in COMMANDS."""

from __future__ import annotations

import gc
import os
import re
import sys

from ..errors import DlscopeError
from ..vocabulary.version import __version__
from .advise import AdviseCommand
from .base import Command, Parser
from .check import CheckCommand
from .diff import DiffCommand
from .export import ExportCommand
from .imports import ImportCommand
from .merge import MergeCommand
from .ncu import NcuCommand
from .no_pandas import block_pandas
from .profile import ProfileCommand
from .report import ReportCommand
from .sql import SqlCommand
from .stats import StatsCommand
from .summary import SummaryCommand
from .try_cmd import TryCommand

COMMANDS: list[type[Command]] = [
    ProfileCommand,
    ImportCommand,
    SummaryCommand,
    AdviseCommand,
    StatsCommand,
    SqlCommand,
    ExportCommand,
    ReportCommand,
    DiffCommand,
    CheckCommand,
    NcuCommand,
    TryCommand,
    MergeCommand,
]


def build_parser(only: str | None = None) -> Parser:
    """The parser; with ``only``, the other commands get no arguments (their modules' heavy
    imports happen in ``run`` and ``add_arguments``, so a command starts up paying for itself only)."""
    parser = Parser(prog="dlscope", description="Profile Python deep-learning programs through every layer.")
    parser.add_argument("--version", action="version", version=f"dlscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for cls in COMMANDS:
        p = sub.add_parser(cls.name, help=cls.help(), description=cls.description())
        cmd = cls()
        if only is None or cls.name == only:
            cmd.add_arguments(p)
        p.set_defaults(_command=cmd)
    return parser


def _command_named(args: list[str]) -> str | None:
    """The subcommand the arguments name (their first word), if any."""
    return args[0] if args and args[0] in {c.name for c in COMMANDS} else None


def one_line(message: str) -> str:
    """An error message on one line: a library's text may carry newlines (SQLite quotes the damaged
    schema it could not parse), and an error is one line on stderr."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `dlscope` script; returns the exit code."""
    try:
        return _main(argv)
    finally:
        if argv is None:
            # The console script's process ends with this command. The interpreter's exit collects
            # garbage over every object the command made, ~90 ms after an analysis of a 500k-event
            # profile (a tenth of the command); frozen, they are left to the process's end. Files are
            # closed by then (each writer's `with`), and objects are still freed by their counts.
            gc.freeze()


def _main(argv: list[str] | None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    try:
        only = _command_named(args_list)
        parser = build_parser(only) if only else build_parser("")
        args = parser.parse_args(args_list)
        cmd = getattr(args, "_command", None)
        if cmd is None:
            parser.print_help()
            return 2
        if argv is None and cmd.without_pandas:  # the console script's own process: nothing else runs here
            block_pandas()
        if cmd.opens_profile:
            from ..application.open import warm_up

            warm_up()
        return int(cmd.run(args))
    except DlscopeError as e:
        print(f"dlscope: {one_line(str(e))}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("dlscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    except Exception as e:
        if os.environ.get("DLSCOPE_DEBUG"):
            raise
        print(
            f"dlscope: internal error: {e.__class__.__name__}: {one_line(str(e))} "
            "(a dlscope bug: rerun with DLSCOPE_DEBUG=1 for the traceback and please report it)",
            file=sys.stderr,
        )
        return 1
