"""Writing one timeline file: the JSON object header, the metadata events, then the event rows,
copied in bulk from DuckDB's Arrow output (the text of a batch is one contiguous buffer), gzip
compressed when the name ends in ``.gz`` (with ISA-L, in a thread beside the one that writes)."""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

# gzip level 1: timelines are written once and opened a few times; ISA-L's level 1 is 3x faster
# than zlib's and its file a little smaller
GZIP_LEVEL = 1
SEPARATOR = b",\n"


def header_bytes(meta: dict[str, Any]) -> bytes:
    """The start of the file up to the opening of ``traceEvents``."""
    head = json.dumps(meta, separators=(",", ":"))
    return head[:-1].encode() + b',"traceEvents":[\n'


TAIL = b"\n]}\n"


def _text_buffer(arr: pa.Array) -> memoryview:
    """The bytes of every string of ``arr``, concatenated (no copy): Arrow stores a string array's
    values back to back, so rows written in order are one slice of its data buffer."""
    if arr.null_count:
        raise ValueError("timeline rows must not be null")
    offsets_type = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=offsets_type)[arr.offset : arr.offset + len(arr) + 1]
    if len(offsets) == 0:
        return memoryview(b"")
    return memoryview(bufs[2])[int(offsets[0]) : int(offsets[-1])]


class _ThreadedFile:
    """A file written by a thread of its own, so that writing (slow on some file systems) runs
    while this thread fetches the next rows; at most ``depth`` buffers wait."""

    def __init__(self, path: Path, depth: int = 2) -> None:
        self._file = open(path, "wb")  # noqa: SIM115 - closed by the thread
        self._queue: queue.Queue[memoryview | bytes | None] = queue.Queue(depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while (buf := self._queue.get()) is not None:
                self._file.write(buf)
        except BaseException as e:  # noqa: BLE001 - handed to the writing thread
            self._error = e
            while self._queue.get() is not None:  # let close() and write() finish
                pass
        finally:
            self._file.close()

    def write(self, buf: memoryview | bytes) -> int:
        if self._error is not None:
            raise self._error
        self._queue.put(buf)
        return len(buf)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error

    def __enter__(self) -> _ThreadedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open(path: Path, compress: bool) -> BinaryIO | _ThreadedFile:
    if compress:
        from isal import igzip_threaded

        # one thread compresses while this one fetches rows; the header's mtime is 0
        threaded: BinaryIO = igzip_threaded.open(path, "wb", compresslevel=GZIP_LEVEL, threads=1)  # type: ignore[no-untyped-call]  # isal ships no annotations
        return threaded
    return _ThreadedFile(path)


class TooLarge(Exception):
    """The rows did not fit in the byte or event limit given to :func:`write_file` (nothing was
    written)."""


@dataclass
class Written:
    """What :func:`write_file` wrote: uncompressed bytes, trace events (metadata events not
    counted) and flows (launch arrows)."""

    bytes: int
    events: int
    flows: int


FLOW_ROW_EVENTS = 3  # a GPU row with its flow: the slice and the arrow's two ends


def write_file(
    path: Path,
    meta: dict[str, Any],
    metadata_events: list[str],
    batches: Iterable[pa.RecordBatch],
    on_rows: Callable[[int], None] | None = None,
    max_bytes: int | None = None,
    max_events: int | None = None,
) -> Written:
    """Write one timeline file atomically; ``batches`` have the columns ``line`` (text whose rows
    already begin with the separator) and ``nev`` (the events in the row). Raises TooLarge,
    leaving no file, when the rows come to more than ``max_bytes`` or ``max_events``."""
    tmp = path.with_name(path.name + ".tmp")
    size = events = flows = 0
    try:
        with _open(tmp, path.name.endswith(".gz")) as f:
            head = header_bytes(meta) + SEPARATOR.join(e.encode() for e in metadata_events)
            f.write(head)
            size += len(head)
            rows = 0
            for batch in batches:
                buf = _text_buffer(batch.column(0))
                nev = batch.column(1).to_numpy(zero_copy_only=False)
                rows += len(buf)
                events += int(nev.sum())
                flows += int((nev == FLOW_ROW_EVENTS).sum())
                if (max_bytes is not None and rows > max_bytes) or (max_events is not None and events > max_events):
                    raise TooLarge(path)
                f.write(buf)
                size += len(buf)
                if on_rows:
                    on_rows(batch.num_rows)
            f.write(TAIL)
            size += len(TAIL)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return Written(size, events, flows)
