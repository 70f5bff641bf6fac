"""What an importer is: it recognizes files of one format and adds their events to a builder.

Importers read files other tools wrote (Kineto/Chrome traces, nsys SQLite exports, ...). An
importer never executes anything from a file and never guesses: what a file lacks is recorded in
the profile's meta as unavailable. :func:`sniff_head` gives every importer the same first bytes
(decompressed) to recognize its format cheaply.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..errors import InputError
from ..store.build import ProfileBuilder
from ..store.meta import Meta

HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class ImportOptions:
    key_node: str | None = None  # a range/op whose instances mark iterations
    rank: int | None = None  # force the rank of every file (else from the file, else its name, else 0)
    progress: Callable[[str, float], None] | None = None  # (what, fraction done)
    extra: dict[str, object] = field(default_factory=dict)


def sniff_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    """The first ``n`` bytes of ``path``, decompressed if it is gzip. Raises InputError if the
    file cannot be read."""
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
            if raw[:2] != GZIP_MAGIC:
                return raw
        with gzip.open(path, "rb") as g:
            return g.read(n)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from None


class Importer:
    """Base class: set ``name``/``description``, implement ``sniff`` and ``load``."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def sniff(self, path: Path, head: bytes) -> bool:
        """True if ``path`` (whose first bytes are ``head``) is in this importer's format."""
        raise NotImplementedError

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        """Add the files' events to ``builder`` (tables with text name columns) and fill ``meta``
        (devices, ranks, frameworks, collectors/notes for what the files lack). Raises InputError
        with one line for a truncated or corrupt file."""
        raise NotImplementedError

    def finish(self, builder: ProfileBuilder, meta: Meta) -> None:
        """Called once after every importer has loaded (to link files of different formats)."""

    def expand_dir(self, directory: Path) -> list[Path]:
        """Files of this format in a directory (e.g. a tensorboard_trace_handler folder)."""
        return []
