"""The `import` use case: traces other tools wrote (Kineto, Nsight Systems, XSpace ...) into one profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..importers.base import ImportOptions


def formats() -> list[str]:
    """Each importer's description: the formats `import` reads."""
    from ..importers import IMPORTERS

    return [i.description for i in IMPORTERS]


def import_traces(inputs: list[str | Path], output: str | Path, options: ImportOptions, force: bool = False) -> Path:
    """Import ``inputs`` (files or directories) into the profile ``output``; returns its path."""
    from ..importers.run import import_files

    return import_files(inputs, output, options, force=force)
