"""Import files into a profile: recognize each file's format, load, build, write."""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import InputError, UsageError
from ..store.build import ProfileBuilder
from ..store.meta import Meta
from ..vocabulary.version import __version__
from . import IMPORTERS
from .base import Importer, ImportOptions, sniff_head


def detect(path: Path) -> Importer:
    head = sniff_head(path)
    if not head.strip():
        raise InputError(f"{path}: empty file")
    for imp in IMPORTERS:
        if imp.sniff(path, head):
            return imp
    kinds = "; ".join(f"{i.description}" for i in IMPORTERS)
    raise InputError(f"{path}: not a format dlscope can import (it reads: {kinds})")


def expand(paths: list[Path]) -> list[Path]:
    """Files to import: directories are searched by every importer for files of its format."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            if (p / "meta.json").exists() or p.suffix == ".dlscope":
                raise InputError(f"{p}: is already a dlscope profile")
            found = sorted({f for imp in IMPORTERS for f in imp.expand_dir(p)})
            if not found:
                raise InputError(f"{p}: no trace files found in this directory")
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise InputError(f"{p}: no such file")
    return out


def import_files(
    paths: list[str | Path], output: str | Path, options: ImportOptions | None = None, force: bool = False
) -> Path:
    """Import ``paths`` (files or directories) into the profile ``output``."""
    options = options or ImportOptions()
    out = Path(output)
    if out.exists():
        if not force:
            raise UsageError(f"{out} exists (use -f to overwrite)")
        if not ((out / "meta.json").exists() or (out / "spool").exists()):
            raise UsageError(f"{out} exists and is not a dlscope profile; not overwriting it")
    files = expand([Path(p) for p in paths])
    if not files:
        raise UsageError("nothing to import")
    groups: dict[str, tuple[Importer, list[Path]]] = {}
    for f in files:
        imp = detect(f)
        groups.setdefault(imp.name, (imp, []))[1].append(f)
    builder = ProfileBuilder()
    meta = Meta(source="imported:" + "+".join(groups), inputs=[str(f) for f in files], dlscope_version=__version__)
    meta.ranks = []
    for imp, group in groups.values():
        imp.load(group, options, builder, meta)
    for imp, _ in groups.values():
        imp.finish(builder, meta)
    meta.ranks = sorted(set(meta.ranks)) or [0]
    meta.key_node = options.key_node
    tmp = out.with_name(out.name + ".importing")
    shutil.rmtree(tmp, ignore_errors=True)
    if options.progress:
        options.progress("linking and writing the profile", 0.8)
    try:
        builder.write(tmp, meta, durable=False)  # the traces are still there to import again
    finally:
        builder.close()  # frees DuckDB's memory before whatever the caller does next
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
