"""The open use case: what the analysis reads, opened. A profile (finalizing a recording a killed
program left), or a trace file dlscope can import into a temporary profile. Shared by the commands
(``cli``) and the notebook API, so neither needs anything from the other.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError, UsageError

if TYPE_CHECKING:
    from ..analysis.core.context import ProfileData, Selection


def warm_up() -> None:
    """Start the database the next open takes, while the caller imports what it needs (a front door
    calls this first for a command that opens a profile: 15-25 ms of DuckDB's start overlapped)."""
    from ..store.reader import warm_open

    warm_open()


def open_for_analysis(path: str, selection: Selection | None = None, statistics: bool = True) -> ProfileData:
    """Open a profile; a recording left unfinished by a killed program is finalized first.
    ``statistics``: see :class:`~dlscope.analysis.core.context.ProfileData`."""
    from ..analysis.core.context import ProfileData
    from ..store.reader import is_unfinished

    p = Path(path)
    if is_unfinished(p):
        from ..capture.finalize import finalize_profile
        from ..store.spool import live_recorders

        live = live_recorders(p / "spool")
        if live:
            raise InputError(
                f"{p}: still being recorded (process {live[0]} is running); open it once the program has finished"
            )

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
    asked = (
        f"{selection.iter_start if selection.iter_start is not None else ''}:"
        f"{selection.iter_stop if selection.iter_stop is not None else ''}"
    )
    raise UsageError(f"--iter-start/--iter-stop {asked} select no step: the profile has steps {first} to {last}")


def is_profile(p: Path) -> bool:
    return p.is_dir() and ((p / "meta.json").exists() or (p / "spool").is_dir())


def is_trace_folder(path: str) -> bool:
    """A folder that holds no profile (finished or not) but files an importer reads: one job's
    traces (a rank per Kineto file, a tensorboard_trace_handler folder ...), which
    :func:`open_any` imports into one profile, as ``dlscope import FOLDER`` does."""
    p = Path(path)
    if not p.is_dir() or is_profile(p):
        return False
    if any(m.parent.name != "spool" for m in p.rglob("meta.json")) or any(p.rglob("spool")):
        return False  # profiles, or recordings to finalize: a folder of profiles
    from ..importers import IMPORTERS

    return any(imp.expand_dir(p) for imp in IMPORTERS)


def each_profile(paths: list[Path], selection: Selection | None = None) -> Iterator[tuple[str, ProfileData]]:
    """Each profile of ``paths`` opened in turn (closed before the next opens), with its path."""
    for path in paths:
        data = open_for_analysis(str(path), selection)
        try:
            yield str(path), data
        finally:
            data.close()


def open_any(
    path: str, stack: contextlib.ExitStack, selection: Selection | None = None, key_node: str | None = None
) -> tuple[ProfileData, str]:
    """Open ``path``: a profile as it is, anything else through the importers into a temporary
    profile removed when ``stack`` closes. Returns the data and the name to show (``path``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such profile or trace")
    if is_profile(p) or p.suffix == ".dlscope":
        data = open_for_analysis(path, selection)
    else:
        from ..importers.base import ImportOptions
        from ..importers.run import import_files

        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dlscope-diff-")))
        out = import_files([p], tmp / "imported.dlscope", ImportOptions(key_node=key_node))
        data = open_for_analysis(str(out), selection)
    stack.callback(data.close)
    return data, str(p)
