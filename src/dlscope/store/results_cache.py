"""Results computed from a finished profile, kept beside it for the next command.

A finished profile changes only through dlscope's own amendments (``ncu`` adds ``kernel_metrics``,
``try`` writes ``tries``), and each of them changes its files. A result of the analysis is then a
pure function of the profile's files, the code that computed it and what was asked: kept under
``<profile>/.cache/``, keyed by all three, it lets ``summary``, ``advise`` and ``report`` on one
profile compute the advice once instead of once each (issue 37: each command recomputed what
another had already measured).

JSON only: a cache is as untrusted as the profile it sits in, and nothing read from it executes.
A cache that cannot be read or written (a read-only profile, a damaged file) is simply not used.
``DLSCOPE_NO_CACHE=1`` turns it off (benchmarks of the computation itself).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..vocabulary.version import __version__

CACHE_DIR = ".cache"
DISABLE_ENV = "DLSCOPE_NO_CACHE"
PACKAGE_DIR = Path(__file__).resolve().parent.parent


@functools.cache
def code_fingerprint(package: Path = PACKAGE_DIR) -> str:
    """The installed code, as the version and every module's size and modification time: a result
    computed by other code (an upgrade, a developer's edit) is never taken for this code's."""
    h = hashlib.sha256(__version__.encode())
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                st = os.stat(os.path.join(root, f))
                h.update(f"{os.path.relpath(os.path.join(root, f), package)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def files_fingerprint(profile_dir: Path, files: Iterable[Path]) -> list[tuple[str, int, int]]:
    """Each file's path in the profile, size and modification time (its table files and meta.json)."""
    out = []
    for f in sorted({Path(p) for p in files}):
        st = f.stat()
        out.append((os.path.relpath(f, profile_dir), st.st_size, st.st_mtime_ns))
    return out


class ResultsCache:
    """The cache of one profile directory: one JSON document per kind of result."""

    def __init__(self, profile_dir: Path, files: Iterable[Path]) -> None:
        self.dir = profile_dir / CACHE_DIR
        self.enabled = os.environ.get(DISABLE_ENV, "") in ("", "0")
        try:
            self._files = files_fingerprint(profile_dir, files) if self.enabled else []
        except OSError:
            self.enabled = False

    def _key(self, kind: str, params: dict[str, Any]) -> str:
        doc = {"kind": kind, "params": params, "code": code_fingerprint(), "files": self._files}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24]

    def _path(self, kind: str, params: dict[str, Any]) -> Path:
        return self.dir / f"{kind}-{self._key(kind, params)}.json"

    def get(self, kind: str, params: dict[str, Any]) -> Any | None:
        """The stored result of ``kind`` for ``params``, or None."""
        if not self.enabled:
            return None
        try:
            return json.loads(self._path(kind, params).read_text())
        except (OSError, ValueError):
            return None

    def put(self, kind: str, params: dict[str, Any], result: Any) -> None:
        """Keep ``result`` (JSON-ready) as the one result of ``kind`` (older ones of this kind go)."""
        if not self.enabled:
            return
        path = self._path(kind, params)
        try:
            self.dir.mkdir(exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(result, allow_nan=True))
            os.replace(tmp, path)  # whole or not at all, whoever reads it meanwhile
            for old in self.dir.glob(f"{kind}-*.json"):
                if old != path:
                    old.unlink(missing_ok=True)
        except OSError:  # a read-only profile (a shared folder, a package's test data): computed every time
            pass
