"""Writing small XSpace protobufs for format tests (field numbers of TSL's xplane.proto).

The real traces in tests/data come from CPU runs; the GPU side of an XSpace (a /device:GPU plane
with stream lines, XLA's /host:CUPTI plane) is written here event by event, with the stats XLA's
CUPTI tracer writes (hlo_op, hlo_module, correlation_id, kernel_details, memcpy_details)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num: int, wt: int) -> bytes:
    return _varint(num << 3 | wt)


def _int(num: int, v: int) -> bytes:
    return _key(num, 0) + _varint(v)


def _bytes(num: int, b: bytes) -> bytes:
    return _key(num, 2) + _varint(len(b)) + b


def _double(num: int, v: float) -> bytes:
    return _key(num, 1) + struct.pack("<d", v)


@dataclass
class Ev:
    name: str
    offset_ns: int
    dur_ns: int
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ln:
    id: int
    name: str
    events: list[Ev]
    timestamp_ns: int = 0


@dataclass
class Pl:
    id: int
    name: str
    lines: list[Ln] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    hlo_protos: dict[str, bytes] = field(default_factory=dict)  # event metadata name -> HloProto (metadata plane)


def _stat(mid: int, v: Any) -> bytes:
    if isinstance(v, str):
        body = _bytes(5, v.encode())
    elif isinstance(v, float):
        body = _double(2, v)
    elif isinstance(v, bytes):
        body = _bytes(6, v)
    else:
        body = _int(4, int(v))
    return _int(1, mid) + body


def plane(p: Pl) -> bytes:
    ev_ids: dict[str, int] = {}
    st_ids: dict[str, int] = {}

    def sid(name: str) -> int:
        return st_ids.setdefault(name, len(st_ids) + 1)

    lines = b""
    for ln in p.lines:
        evs = b""
        for e in ln.events:
            mid = ev_ids.setdefault(e.name, len(ev_ids) + 1)
            body = _int(1, mid) + _int(2, e.offset_ns * 1000) + _int(3, e.dur_ns * 1000)
            for k, v in e.stats.items():
                body += _bytes(4, _stat(sid(k), v))
            evs += _bytes(4, body)
        lines += _bytes(3, _int(1, ln.id) + _bytes(2, ln.name.encode()) + _int(3, ln.timestamp_ns) + evs)
    out = _int(1, p.id) + _bytes(2, p.name.encode()) + lines
    for k, v in p.stats.items():
        out += _bytes(6, _stat(sid(k), v))
    for name, blob in p.hlo_protos.items():
        i = ev_ids.setdefault(name, len(ev_ids) + 1)
        md = _int(1, i) + _bytes(2, name.encode()) + _bytes(5, _stat(sid("Hlo Proto"), blob))
        out += _bytes(4, _int(1, i) + _bytes(2, md))
        ev_ids[name] = -i  # written
    for name, i in ev_ids.items():
        if i > 0:
            out += _bytes(4, _int(1, i) + _bytes(2, _int(1, i) + _bytes(2, name.encode())))
    for name, i in st_ids.items():
        out += _bytes(5, _int(1, i) + _bytes(2, _int(1, i) + _bytes(2, name.encode())))
    return out


def xspace(planes: list[Pl], hostname: str = "gpuhost") -> bytes:
    return b"".join(_bytes(1, plane(p)) for p in planes) + _bytes(4, hostname.encode())


def hlo_proto(module: str, ops: dict[str, tuple[str, str, str, int]]) -> bytes:
    """An HloProto of one computation whose instructions have metadata: name -> (op_name, file,
    function, line), each with its own one-frame stack (field numbers of XLA's hlo.proto)."""
    files, funcs, locs, frames, instrs = b"", b"", b"", b"", b""
    for i, (name, (op_name, file, func, line)) in enumerate(ops.items(), 1):
        files += _bytes(1, file.encode())
        funcs += _bytes(2, func.encode())
        locs += _bytes(3, _int(1, i) + _int(2, i) + _int(3, line))
        frames += _bytes(4, _int(1, i))
        instrs += _bytes(
            2, _bytes(1, name.encode()) + _bytes(2, b"fusion") + _bytes(7, _bytes(2, op_name.encode()) + _int(15, i))
        )
    module_proto = (
        _bytes(1, module.encode()) + _bytes(3, _bytes(1, b"main") + instrs) + _bytes(17, files + funcs + locs + frames)
    )
    return _bytes(1, module_proto)
