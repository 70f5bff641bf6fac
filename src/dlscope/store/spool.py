"""The spool: what a recording process appends to while the program runs.

A profile being recorded is ``NAME.dlscope/spool/``. Every recording process writes its own
files there, named after its pid, so that forked or spawned processes never share a file:

* ``PID.session.json``  written once at start (atomically): rank, clock offset, settings.
* ``PID.events.spool``   append-only blocks of int64 values (below).
* ``PID.strings.jsonl``  interned names, one ``[id, "value"]`` line each, appended.
* ``PID.end.json``       written at a clean stop; its absence means the process died.
* ``PID.steps.spool``    every step boundary as it happens (:class:`StepLedgerWriter`): what a
  killed process completed, to the step, where its events spool ends at its last flush.
* ``PID.exit.json``      how the process ended, written by the launcher that waited for it
  (``capture.child_exits``): its return code and when it was seen.
* other collectors' files (``PID.torch.json`` ...), each read by that collector's decoder.

Block format of ``*.events.spool``: the magic ``DLSPOOL1`` then blocks of
``int64[4] header = (kind, a, b, n)`` followed by ``n`` int64 values, little-endian. A block is
written with one ``write`` call and flushed, so a killed process loses at most its unflushed
buffer; a torn last block is read up to its last whole value. Only the standard library is used
on the writing side, so recording imports nothing heavy into the profiled program.
"""

from __future__ import annotations

import json
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"DLSPOOL1"
_HEADER = struct.Struct("<4q")
_VALUE = struct.Struct("<q")

# Block kinds of *.events.spool.
PHASE = 1  # a = name_id, b = tid; values: +monotonic ns at enter, -monotonic ns at exit
MARK = 2  # a = name_id, b = tid; values: monotonic ns
STEP = 3  # a = source (below), b = tid; values: monotonic ns of each step boundary

STEP_EXPLICIT = 0  # the program called step()
STEP_OPTIMIZER = 1  # an optimizer step (programs that never call step())
STEP_SOURCES = {STEP_EXPLICIT: "dlscope", STEP_OPTIMIZER: "optimizer"}

if array("q").itemsize != 8:  # pragma: no cover - every supported platform has 64-bit 'q'
    raise ImportError("dlscope needs a 64-bit array('q')")


def write_json_atomic(path: Path, data: dict[str, Any], durable: bool = True) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never a torn one.
    ``durable``: on disk before this returns (an fsync: 0.1 s on a VM's disk), so that a power
    loss keeps it too."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)


class EventSpoolWriter:
    """Appends blocks to one ``*.events.spool`` file. Not thread-safe: one flusher owns it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        new = not path.exists() or path.stat().st_size == 0
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115 - lives as long as the session
        if new:
            self._f.write(MAGIC)
        self.bytes_written = 0

    def write_blocks(self, blocks: list[tuple[int, int, int, list[int]]]) -> None:
        """Write several blocks with a single write() call."""
        out = bytearray()
        for kind, a, b, values in blocks:
            out += _HEADER.pack(kind, a, b, len(values))
            out += array("q", values).tobytes()
        if out:
            self._f.write(out)
            self.bytes_written += len(out)

    def close(self) -> None:
        self._f.close()


class StepLedgerWriter:
    """Appends each step boundary to ``PID.steps.spool`` the moment it happens: one STEP block of
    one value per boundary, in the events spool's format, with one unbuffered ``write`` (a few
    microseconds). The data a process wrote survives its SIGKILL in the page cache, so a killed
    process's steps are known up to the kill, where its events spool ends at its last flush
    (about a second before). Safe from any thread: each boundary is one ``O_APPEND`` write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size == 0:
            os.write(self._fd, MAGIC)

    def write(self, source: int, tid: int, t: int) -> None:
        fd = self._fd
        if fd is not None:
            try:
                os.write(fd, _HEADER.pack(STEP, source, tid, 1) + _VALUE.pack(t))
            except OSError:  # disk full, or closed under us: the events spool still has the steps
                self._fd = None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class StringSpoolWriter:
    """Appends interned strings as JSON lines."""

    def __init__(self, path: Path) -> None:
        self._f = open(path, "a", encoding="utf-8")  # noqa: SIM115

    def write(self, items: list[tuple[int, str]]) -> None:
        if items:
            self._f.write("".join(json.dumps([i, s]) + "\n" for i, s in items))
            self._f.flush()

    def close(self) -> None:
        self._f.close()


@dataclass
class Block:
    kind: int
    a: int
    b: int
    values: Any  # numpy int64 array


def read_event_blocks(path: Path) -> tuple[list[Block], bool]:
    """Read every block of an events spool. Returns (blocks, torn) where ``torn`` says the file
    ended inside a block (the process was killed while writing); the torn block's whole values
    are kept."""
    import numpy as np

    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError("not a dlscope spool file")
    pos, end, blocks, torn = len(MAGIC), len(data), [], False
    while pos < end:
        if end - pos < _HEADER.size:
            torn = True
            break
        kind, a, b, n = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        if n < 0 or kind not in (PHASE, MARK, STEP):
            raise ValueError(f"corrupt block header at byte {pos - _HEADER.size}")
        avail = min(n, (end - pos) // 8)
        torn = torn or avail < n
        blocks.append(Block(kind, a, b, np.frombuffer(data, dtype="<i8", count=avail, offset=pos)))
        pos += avail * 8
        if avail < n:
            break
    return blocks, torn


def read_strings(path: Path) -> dict[int, str]:
    """Read an interned-strings file; a torn last line is ignored."""
    out: dict[int, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                i, s = json.loads(line)
            except ValueError:
                break
            out[int(i)] = str(s)
    return out


def spool_pids(spool_dir: Path) -> list[int]:
    """The pids that started recording in this spool."""
    pids = []
    for p in spool_dir.glob("*.session.json"):
        head = p.name.split(".", 1)[0]
        if head.isdigit():
            pids.append(int(head))
    return sorted(pids)


def live_recorders(spool_dir: Path) -> list[int]:
    """Pids of this spool's recording processes that are still running on this host (started,
    not stopped, and alive). A profile with live recorders must not be finalized under them."""
    import socket

    host = socket.gethostname()
    live = []
    for pid in spool_pids(spool_dir):
        if (spool_dir / f"{pid}.end.json").exists():
            continue
        try:
            session = json.loads((spool_dir / f"{pid}.session.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(session, dict) or session.get("host") != host:
            continue  # recorded elsewhere (a shared filesystem): its pid means nothing here
        started = session.get("start_ns")
        if _running(pid, started if isinstance(started, int) else None):
            live.append(pid)
    return live


def _running(pid: int, recording_start_ns: int | None = None) -> bool:
    """Whether ``pid`` exists, is not a zombie (a killed process its parent has not reaped) and,
    where /proc tells, started before the recording did: a process that started later only
    reuses the pid of a recorder long gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, someone else's
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # "pid (comm) state ...": the name may hold spaces and parentheses, the state follows the last ')'
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc (macOS): it exists
    if not fields or fields[0] == b"Z":
        return False
    if recording_start_ns is not None and len(fields) > 19:
        born_ns = _boot_time_ns() + int(fields[19]) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
        if born_ns > recording_start_ns + 2_000_000_000:  # 2 s: the tick and boot-time roundings
            return False
    return True


def _boot_time_ns() -> int:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1]) * 1_000_000_000
    except (OSError, ValueError):
        pass
    return 0


def iter_files(spool_dir: Path, pid: int, suffix: str) -> Iterator[Path]:
    p = spool_dir / f"{pid}.{suffix}"
    if p.exists():
        yield p
