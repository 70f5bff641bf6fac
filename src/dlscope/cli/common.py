"""Arguments and helpers several commands share."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError, UsageError

if TYPE_CHECKING:  # loaded by the command that runs, not by building the parser
    from ..analysis.context import ProfileData, Selection


def add_selection(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("iterations")
    g.add_argument("--iter-start", type=int, metavar="N", help="first step to include (inclusive)")
    g.add_argument("--iter-stop", type=int, metavar="M", help="last step to include (inclusive)")
    g.add_argument("--include-warmup", action="store_true", help="keep warm-up steps in statistics")
    g.add_argument("--key-node", metavar="NAME",
                   help="a phase, NVTX range or op whose instances mark iterations (as in DLProf)")


def selection_from(args: argparse.Namespace) -> Selection:
    from ..analysis.context import Selection

    start, stop = getattr(args, "iter_start", None), getattr(args, "iter_stop", None)
    if start is not None and stop is not None and stop < start:
        raise UsageError(f"--iter-stop {stop} is before --iter-start {start}")
    return Selection(start, stop, bool(getattr(args, "include_warmup", False)), getattr(args, "key_node", None))


def open_for_analysis(path: str, selection: Selection | None = None, statistics: bool = True) -> ProfileData:
    """Open a profile; a recording left unfinished by a killed program is finalized first.
    ``statistics``: see :class:`~dlscope.analysis.context.ProfileData`."""
    from ..analysis.context import ProfileData
    from ..store.reader import is_unfinished

    p = Path(path)
    if is_unfinished(p):
        from ..capture.finalize import finalize_profile
        from ..store.spool import live_recorders

        live = live_recorders(p / "spool")
        if live:
            raise InputError(f"{p}: still being recorded (process {live[0]} is running); "
                             "open it once the program has finished")

        finalize_profile(p)
        print(f"dlscope: finalized the recording left unfinished in {p}", file=sys.stderr)
    data = ProfileData.open(p, selection, statistics)
    if selection is not None and (selection.iter_start is not None or selection.iter_stop is not None):
        _check_range(data, selection)
    return data


def _check_range(data: ProfileData, selection: Selection) -> None:
    """An iteration range that selects no step of a profile that has steps is a bad flag: say
    which steps there are instead of printing empty tables."""
    if data.scalar("SELECT count(*) FROM sel_steps"):
        return
    first, last = data.con.execute("SELECT min(step), max(step) FROM steps").fetchall()[0]
    if first is None:
        return  # no steps at all: the reports say so themselves
    asked = f"{selection.iter_start if selection.iter_start is not None else ''}:" \
            f"{selection.iter_stop if selection.iter_stop is not None else ''}"
    raise UsageError(f"--iter-start/--iter-stop {asked} select no step: the profile has steps {first} to {last}")


def add_format(parser: argparse.ArgumentParser, choices: tuple[str, ...] = ("table", "csv", "json"),
               default: str = "table") -> None:
    parser.add_argument("--format", choices=choices, default=default, help=f"output format (default: {default})")
