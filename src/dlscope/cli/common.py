"""Arguments and helpers several commands share."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..application.open import open_for_analysis as open_for_analysis  # the commands' opener
from ..errors import UsageError

if TYPE_CHECKING:  # loaded by the command that runs, not by building the parser
    from ..analysis.core.context import Selection


def add_selection(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("iterations")
    g.add_argument("--iter-start", type=int, metavar="N", help="first step to include (inclusive)")
    g.add_argument("--iter-stop", type=int, metavar="M", help="last step to include (inclusive)")
    g.add_argument("--include-warmup", action="store_true", help="keep warm-up steps in statistics")
    g.add_argument(
        "--key-node", metavar="NAME", help="a phase, NVTX range or op whose instances mark iterations (as in DLProf)"
    )


def selection_from(args: argparse.Namespace) -> Selection:
    from ..analysis.core.context import Selection

    start, stop = getattr(args, "iter_start", None), getattr(args, "iter_stop", None)
    if start is not None and stop is not None and stop < start:
        raise UsageError(f"--iter-stop {stop} is before --iter-start {start}")
    return Selection(start, stop, bool(getattr(args, "include_warmup", False)), getattr(args, "key_node", None))


def add_format(
    parser: argparse.ArgumentParser, choices: tuple[str, ...] = ("table", "csv", "json"), default: str = "table"
) -> None:
    parser.add_argument("--format", choices=choices, default=default, help=f"output format (default: {default})")
