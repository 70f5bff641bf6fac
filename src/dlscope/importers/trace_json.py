"""Carving a Chrome/Kineto trace JSON into its event array and its metadata, streaming.

A Kineto trace is one JSON object: a few small metadata keys and a ``traceEvents`` array holding
almost all of the bytes (170 MB for 500k events). Parsing it whole in Python costs seconds and a
dict per event. Instead the file is decompressed once, in chunks, into temporary files holding
only the array, which DuckDB's JSON reader then parses in C++ straight into columns; the metadata
before and after the array is parsed with ``json``. Memory stays at a few chunk sizes whatever the
trace size.

DuckDB parses one JSON array file on one thread, so the array is written as one file per core
(parts of equal size, from the size of the decompressed stream), each a valid array, cut between
two events: parsed side by side (see :mod:`.parallel_parse`) they take 0.70 s instead of 1.17 s
on 2 cores for 170 MB. A cut is placed at the first ``}, {`` of a block; one that fell inside a
string or a nested value leaves a part that is not valid JSON, so a wrong cut is always detected
(the reader then reads the array whole).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO, cast

from ..errors import InputError
from .base import GZIP_MAGIC

CHUNK = 4 << 20
MIN_PART_BYTES = 16 << 20  # smaller traces are one file: a thread per part costs more than it saves
_EVENT_SEP = re.compile(rb"\}\s*,\s*\{")
TAIL_KEEP = 1 << 20  # metadata after the array is small; keep this much of the stream's end
HEAD_LIMIT = 64 << 20  # a traceEvents key further than this from the start is not a trace
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# A time value with more significant digits than a double holds (absolute epoch microseconds with
# nanosecond decimals: 1712195495505582.988). DuckDB reads JSON numbers through a double, so such
# traces get their ts/dur numbers quoted while carving and are parsed from the exact text.
_LONG_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*-?\d{14,}\.\d+')
_TIME_NUMBER = re.compile(rb'("(?:ts|dur)"\s*:\s*)(-?[0-9][0-9.eE+-]*)')


class _Quoter:
    """Quotes ts/dur numbers in a byte stream cut at arbitrary points (a number may span two
    chunks, so the end of each chunk after its last separator waits for the next)."""

    def __init__(self) -> None:
        self.pending = b""

    def feed(self, block: bytes, final: bool = False) -> bytes:
        data = self.pending + block
        if final:
            self.pending = b""
        else:
            cut = max(data.rfind(b","), data.rfind(b"}"), data.rfind(b"]")) + 1
            data, self.pending = data[:cut], data[cut:]
        return _TIME_NUMBER.sub(rb'\1"\2"', data)


@dataclass
class CarvedTrace:
    event_files: list[Path]  # JSON arrays of event objects: the trace's events, in order
    metadata: dict[str, Any]  # every top-level key except traceEvents
    array_bytes: int


class _Parts:
    """Writes the event array (a stream of bytes starting at its ``[``) as files of about
    ``part_bytes`` each, every one a valid JSON array if the cuts fell between events. Offsets
    are positions in the stream; a part after the first starts with an added ``[``."""

    def __init__(self, workdir: Path, part_bytes: int | None) -> None:
        self.workdir = workdir
        self.part_bytes = part_bytes
        self.files: list[Path] = []
        self.starts: list[int] = []  # stream offset of each part's first byte
        self.written = 0  # stream bytes so far
        self._in_part = 0
        self._out = self._open(0)

    def _open(self, start: int) -> BinaryIO:
        path = self.workdir / f"events.{len(self.files):03d}.json"
        self.files.append(path)
        self.starts.append(start)
        self._in_part = 0
        return open(path, "wb")

    def write(self, block: bytes) -> None:
        while self.part_bytes and self._in_part + len(block) > self.part_bytes:
            m = _EVENT_SEP.search(block, max(0, self.part_bytes - self._in_part))
            if m is None:  # no event ends in the rest of this block: cut in a later one
                break
            self._out.write(block[: m.start() + 1] + b"\n]")
            self._out.close()
            rest = m.end() - 1  # from the '{'
            self.written += rest
            self._out = self._open(self.written)
            self._out.write(b"[")
            block = block[rest:]
        self._out.write(block)
        self._in_part += len(block)
        self.written += len(block)

    def end_at(self, cut: int) -> None:
        """Close the array at stream offset ``cut`` (just past its ``]``): the part holding it is
        truncated there and any later part (cut in what followed the array) removed."""
        self._out.close()
        k = max(i for i, start in enumerate(self.starts) if start < cut)
        with open(self.files[k], "r+b") as f:
            f.truncate(cut - self.starts[k] + (1 if k else 0))
        for extra in self.files[k + 1 :]:
            extra.unlink()
        del self.files[k + 1 :], self.starts[k + 1 :]

    def close(self) -> None:
        self._out.close()


_gzip: ModuleType
_DECOMPRESS_ERRORS: tuple[type[BaseException], ...]
try:  # ISA-L's gzip decompresses about 3x faster than zlib's (170 MB: 0.12 s vs 0.38 s here)
    from isal import igzip, isal_zlib

    _gzip = igzip
    _DECOMPRESS_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, cast("type[BaseException]", isal_zlib.error))
except ImportError:  # pragma: no cover - isal is a dependency, but a plain gzip still works
    _gzip = gzip
    _DECOMPRESS_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def stream_size(path: Path) -> int:
    """The size of the file's decompressed bytes: the gzip trailer's ISIZE (the size modulo 4 GiB
    of a single-member file), else the file's size. An estimate: it only sizes the parts."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            if f.read(2) != GZIP_MAGIC or size < 18:
                return size
            f.seek(-4, 2)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return size
    while isize < size:  # past 4 GiB (or a multi-member file): at least the compressed size
        isize += 1 << 32
    return isize


def _chunks(path: Path) -> Iterator[bytes]:
    """The file's decompressed bytes, in blocks."""
    for block, _ in _blocks(path):
        yield block


def _blocks(path: Path) -> Iterator[tuple[bytes, int]]:
    """Decompressed blocks, each with how many bytes of the (compressed) file were read so far."""
    try:
        with open(path, "rb") as raw:
            gz = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            f = _gzip.open(raw, "rb") if gz else raw
            while True:
                block = f.read(CHUNK)
                if not block:
                    return
                yield block, raw.tell()
    except _DECOMPRESS_ERRORS as e:
        raise InputError(f"{path}: truncated or corrupt compressed file ({e.__class__.__name__})") from None
    except OSError as e:
        raise InputError(f"{path}: unreadable ({e})") from None


def _keep_tail(tail: bytes, block: bytes) -> bytes:
    """The last TAIL_KEEP bytes of the stream so far (without copying 5 MB per 4 MB block)."""
    if len(block) >= TAIL_KEEP:
        return block[-TAIL_KEEP:]
    return (tail + block)[-TAIL_KEEP:]


SCAN_PAST_VALID = 256 << 10  # how far before the last valid end to keep looking for an earlier one


def _end_of_array(tail: bytes) -> tuple[int, dict[str, Any]] | None:
    """Find the ``]`` closing the event array in the stream's tail.

    A candidate is valid when what follows it is a valid end of the top-level object (``}`` or
    ``, "key": value ... }``). Later top-level arrays (Kineto's ``INFO``) close with valid
    candidates too, but each one's remainder is contained in the remainder of the one before, so
    the earliest valid candidate is the event array's end. A ``]`` inside the events never
    qualifies: its remainder still holds the closing braces of the events after it."""
    pos = len(tail)
    best: tuple[int, dict[str, Any]] | None = None
    while True:
        pos = tail.rfind(b"]", 0, pos)
        if pos < 0 or (best is not None and best[0] - pos > SCAN_PAST_VALID):
            return best
        rest = tail[pos + 1 :].strip()
        if rest == b"}":
            best = (pos, {})
        elif rest.startswith(b","):
            try:
                extra = json.loads(b"{" + rest[1:])
            except ValueError:
                continue
            if isinstance(extra, dict):
                best = (pos, extra)


def carve(path: Path, workdir: Path, progress: Callable[[float], None] | None = None, parts: int = 1) -> CarvedTrace:
    """Write the trace's event array to files in ``workdir`` (up to ``parts`` of equal size, none
    under :data:`MIN_PART_BYTES`) and return them with the metadata. ``progress`` gets the
    fraction of the input file read. Raises InputError for a file that is not a trace or is
    truncated."""
    part_bytes = max(MIN_PART_BYTES, -(-stream_size(path) // parts)) if parts > 1 else None
    head = b""
    tail = b""
    header: dict[str, Any] | None = None
    top_level_array = False
    quoter: _Quoter | None = None
    decided = False
    size = max(path.stat().st_size, 1) if progress else 1
    out = _Parts(workdir, part_bytes)
    try:
        for block, consumed in _blocks(path):
            if progress:
                progress(min(consumed / size, 1.0))
            if header is None and not top_level_array:
                head += block
                stripped = head.lstrip()
                if stripped[:1] == b"[":  # Chrome's "JSON Array Format": the file is the array
                    top_level_array = True
                    block, head = stripped, b""
                else:
                    m = _KEY.search(head)
                    if m is None:
                        if len(head) > HEAD_LIMIT:
                            raise InputError(f"{path}: not a trace (no traceEvents array)")
                        continue
                    head_text = head[: m.start()]
                    header = {"_head": head_text}
                    block = head[m.end() - 1 :]  # from the '['
                    head = b""
            if not decided:
                decided = True
                quoter = _Quoter() if _LONG_TIME.search(block[: 1 << 20]) else None
            if quoter is not None:
                block = quoter.feed(block)
            out.write(block)
            tail = _keep_tail(tail, block)
        if quoter is not None:
            block = quoter.feed(b"", final=True)
            out.write(block)
            tail = _keep_tail(tail, block)
        if header is None and not top_level_array:
            raise InputError(f"{path}: not a trace (no traceEvents array)" if head.strip() else f"{path}: empty file")
        if top_level_array:
            end = tail.rstrip()
            if not end.endswith(b"]"):
                raise InputError(f"{path}: truncated trace (the event array is not closed)")
            out.end_at(out.written)
            return CarvedTrace(out.files, {}, out.written)
        assert header is not None  # no traceEvents array and no top-level array raised above
        found = _end_of_array(tail)
        if found is None:
            raise InputError(f"{path}: truncated or malformed trace (cannot find the end of traceEvents)")
        pos, after = found
        cut = out.written - len(tail) + pos + 1
        out.end_at(cut)
    finally:
        out.close()
    head_text = header["_head"].rstrip()
    if head_text.endswith(b","):
        head_text = head_text[:-1]
    try:
        before = json.loads(head_text + b"}") if head_text.strip() != b"{" else {}
    except ValueError:
        raise InputError(f"{path}: malformed trace metadata before traceEvents") from None
    if not isinstance(before, dict):
        raise InputError(f"{path}: not a trace (top level is not an object)")
    before.update(after)
    return CarvedTrace(out.files, before, cut)
