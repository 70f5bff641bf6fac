"""Carving a Chrome/Kineto trace JSON into its event array and its metadata, streaming.

A Kineto trace is one JSON object: a few small metadata keys and a ``traceEvents`` array holding
almost all of the bytes (170 MB for 500k events). Parsing it whole in Python costs seconds and a
dict per event. Instead the file is decompressed once, in chunks, into temporary files holding
only the array, which DuckDB's JSON reader then parses in C++ straight into columns; the
metadata before and after the array is parsed with ``json``. Memory stays at a few chunk sizes
whatever the trace size.

DuckDB reads one JSON array on one thread, so a large array is written as several files, each
a valid array of whole events (cut between two events), which its threads read side by side.
A cut is made only where ``}`` , ``,`` and a line break separate two objects: a line break
cannot occur inside a JSON string, and a cut inside a nested object leaves both files invalid,
so a file set DuckDB accepts is the same events as the whole array (else the caller joins the
parts back, :meth:`CarvedTrace.joined`).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from .base import GZIP_MAGIC

CHUNK = 4 << 20
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
    events_paths: list[Path]  # JSON arrays of event objects: the trace's events, in order
    metadata: dict[str, Any]  # every top-level key except traceEvents
    array_bytes: int

    @property
    def events_path(self) -> Path:
        """The first (or only) part."""
        return self.events_paths[0]

    def joined(self) -> Path:
        """The parts joined back into one array file (for a trace whose cuts DuckDB refused)."""
        if len(self.events_paths) == 1:
            return self.events_paths[0]
        out = self.events_paths[0].with_name("events-joined.json")
        with open(out, "wb") as f:
            for i, part in enumerate(self.events_paths):
                data = part.read_bytes()
                if i:
                    f.write(b",\n")
                    data = data[1:]  # its opening '['
                if i < len(self.events_paths) - 1:
                    data = data[:-1]  # its closing ']'
                f.write(data)
        self.events_paths = [out]
        return out


# a cut between two events: '}' ',' and a line break (never inside a string), then '{'
_BETWEEN_EVENTS = re.compile(rb"\}[ \t\r]*,[ \t\r]*\n[ \t\r\n]*\{")
PART_BYTES = 48 << 20


class _Parts:
    """Writes the array's bytes as files of about ``part_bytes`` each, cut between events, and
    maps offsets of the written stream to files (the array's end is found only at the end)."""

    def __init__(self, workdir: Path, part_bytes: int) -> None:
        self.workdir = workdir
        self.part_bytes = part_bytes
        self.paths: list[Path] = []
        self.starts: list[int] = []  # stream offset of each part's first byte (after its added '[')
        self.offset = 0  # bytes of the stream consumed
        self._open()

    def _open(self) -> None:
        path = self.workdir / f"events{len(self.paths)}.json"
        self.f = open(path, "wb")  # noqa: SIM115 - closed by _close/close
        self.paths.append(path)
        self.starts.append(self.offset)
        self.size = 0

    def _emit(self, data: bytes) -> None:
        self.f.write(data)
        self.size += len(data)
        self.offset += len(data)

    def write(self, data: bytes) -> None:
        while self.part_bytes and self.size + len(data) > self.part_bytes:
            m = _BETWEEN_EVENTS.search(data, max(0, self.part_bytes - self.size))
            if m is None:
                break
            self._emit(data[:m.start() + 1])
            self.f.write(b"]")
            self.f.close()
            self.offset += m.end() - 1 - (m.start() + 1)  # the comma and blanks left out
            self._open()
            self.f.write(b"[")
            data = data[m.end() - 1:]
        self._emit(data)

    def truncate(self, cut: int) -> None:
        """End the array at stream offset ``cut``: later parts go, the part holding it is cut."""
        self.f.close()
        j = max(i for i, start in enumerate(self.starts) if start < cut)
        for extra in self.paths[j + 1:]:
            extra.unlink()
        del self.paths[j + 1:]
        with open(self.paths[j], "r+b") as f:
            f.truncate(cut - self.starts[j] + (1 if j else 0))

    def close(self) -> None:
        self.f.close()


try:  # ISA-L's gzip decompresses about 3x faster than zlib's (170 MB: 0.12 s vs 0.38 s here)
    from isal import igzip as _gzip
    from isal import isal_zlib

    _DECOMPRESS_ERRORS: tuple[type[BaseException], ...] = (EOFError, zlib.error, gzip.BadGzipFile, isal_zlib.error)
except ImportError:  # pragma: no cover - isal is a dependency, but a plain gzip still works
    _gzip = gzip  # type: ignore[assignment]
    _DECOMPRESS_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile)


def _chunks(path: Path):  # type: ignore[no-untyped-def]
    """The file's decompressed bytes, in blocks."""
    for block, _ in _blocks(path):
        yield block


def _blocks(path: Path):  # type: ignore[no-untyped-def]
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
        rest = tail[pos + 1:].strip()
        if rest == b"}":
            best = (pos, {})
        elif rest.startswith(b","):
            try:
                extra = json.loads(b"{" + rest[1:])
            except ValueError:
                continue
            if isinstance(extra, dict):
                best = (pos, extra)


def carve(path: Path, workdir: Path, progress: Callable[[float], None] | None = None,
          part_bytes: int | None = None) -> CarvedTrace:
    """Write the trace's event array to ``workdir/events*.json`` (parts of about ``part_bytes``,
    default PART_BYTES; 0: one file) and return them with the metadata. ``progress`` gets the fraction of the input
    file read. Raises InputError for a file that is not a trace or is truncated."""
    head = b""
    written = 0
    tail = b""
    header: dict[str, Any] | None = None
    top_level_array = False
    quoter: _Quoter | None = None
    decided = False
    size = max(path.stat().st_size, 1) if progress else 1
    out = _Parts(workdir, PART_BYTES if part_bytes is None else part_bytes)
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
                    head_text = head[:m.start()]
                    header = {"_head": head_text}
                    block = head[m.end() - 1:]  # from the '['
                    head = b""
            if not decided:
                decided = True
                quoter = _Quoter() if _LONG_TIME.search(block[: 1 << 20]) else None
            if quoter is not None:
                block = quoter.feed(block)
            out.write(block)
            written += len(block)
            tail = (tail + block)[-TAIL_KEEP:]
        if quoter is not None:
            block = quoter.feed(b"", final=True)
            out.write(block)
            written += len(block)
            tail = (tail + block)[-TAIL_KEEP:]
        if header is None and not top_level_array:
            raise InputError(f"{path}: not a trace (no traceEvents array)" if head.strip()
                             else f"{path}: empty file")
        if top_level_array:
            end = tail.rstrip()
            if not end.endswith(b"]"):
                raise InputError(f"{path}: truncated trace (the event array is not closed)")
            return CarvedTrace(out.paths, {}, written)
        found = _end_of_array(tail)
        if found is None:
            raise InputError(f"{path}: truncated or malformed trace (cannot find the end of traceEvents)")
        pos, after = found
        cut = written - len(tail) + pos + 1
        out.truncate(cut)
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
    return CarvedTrace(out.paths, before, cut)
