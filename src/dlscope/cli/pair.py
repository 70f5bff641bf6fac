"""Opening either side of a comparison: a profile, or a trace file dlscope can import.

``dlscope diff`` and ``dlscope check`` accept what ``dlscope import`` reads (a Kineto trace, an
nsys SQLite export, a trace folder) as well as profiles: a trace is imported into a temporary
profile that lives as long as the command, so comparing two traces needs no extra step.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from ..analysis.context import ProfileData, Selection
from ..errors import InputError
from ..importers.base import ImportOptions
from ..importers.run import import_files
from .common import open_for_analysis


def is_profile(p: Path) -> bool:
    return p.is_dir() and ((p / "meta.json").exists() or (p / "spool").is_dir())


def open_any(path: str, stack: contextlib.ExitStack, selection: Selection | None = None,
             key_node: str | None = None) -> tuple[ProfileData, str]:
    """Open ``path``: a profile as it is, anything else through the importers into a temporary
    profile removed when ``stack`` closes. Returns the data and the name to show (``path``)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such profile or trace")
    if is_profile(p) or p.suffix == ".dlscope":
        data = open_for_analysis(path, selection)
    else:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dlscope-diff-")))
        out = import_files([p], tmp / "imported.dlscope", ImportOptions(key_node=key_node))
        data = open_for_analysis(str(out), selection)
    stack.callback(data.close)
    return data, str(p)
