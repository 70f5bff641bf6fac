"""Reading XProf's ``*.xplane.pb`` (an ``XSpace`` protobuf) without the protobuf package.

JAX's and TensorFlow's profilers (``jax.profiler``, ``tf.profiler.experimental``, both the same
TSL profiler) write one XSpace per host: planes (``/host:CPU``, ``/device:GPU:0`` ...) holding
lines (threads, CUDA streams) holding events; names and stat keys are interned in per-plane
metadata maps. Only the fields dlscope reads are decoded (field numbers from TSL's
``xplane.proto``); unknown fields are skipped, as protobuf readers do, so newer writers still
read. Event times are absolute: line ``timestamp_ns`` plus event ``offset_ps``.

Corrupt input raises :class:`ValueError` with a short reason, a field of the wrong wire type
included (a number where a message or text belongs, or the reverse).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

_DOUBLE = struct.Struct("<d")


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _num(v: Any) -> int:
    """A varint field's value; ValueError for a field of another wire type."""
    if not isinstance(v, int):
        raise ValueError("a number field of the wrong wire type")
    return v


def _signed(value: Any) -> int:
    v = _num(value)
    return v - (1 << 64) if v >= 1 << 63 else v


def fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of one message: ints for varints and fixed, bytes for
    length-delimited fields. ValueError where ``buf`` is a number (a field that should hold a
    message, of the wrong wire type)."""
    if not isinstance(buf, bytes):
        raise ValueError("a message field of the wrong wire type")
    out: list[tuple[int, int, Any]] = []
    i, n = 0, len(buf)
    v: int | bytes
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            if i + 8 > n:
                raise ValueError("truncated fixed64")
            v = buf[i : i + 8]
            i += 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            if i + ln > n:
                raise ValueError("truncated field")
            v = buf[i : i + ln]
            i += ln
        elif wt == 5:
            if i + 4 > n:
                raise ValueError("truncated fixed32")
            v = buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        out.append((num, wt, v))
    return out


@dataclass
class Event:
    name: str  # the metadata's name (TensorFlow: 'scope/node:Type')
    start_ns: int
    dur_ns: int
    stats: dict[str, Any]
    display: str = ""  # the display name where it differs (TensorFlow: the op type)


@dataclass
class Line:
    id: int
    name: str
    events: list[Event] = field(default_factory=list)


@dataclass
class Plane:
    id: int
    name: str
    lines: list[Line] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    # event metadata name -> its bytes stats (the metadata plane keeps each module's HloProto there)
    blobs: dict[str, bytes] = field(default_factory=dict)


def _text(b: Any) -> str:
    if not isinstance(b, bytes):
        raise ValueError("a text field of the wrong wire type")
    return b.decode("utf-8", "replace")


def _stat(buf: bytes, stat_names: dict[int, str]) -> tuple[str, Any]:
    mid, value = 0, None
    for num, wt, v in fields(buf):
        if num == 1:
            mid = _num(v)
        elif num == 2 and wt == 1:
            value = _DOUBLE.unpack(v)[0]
        elif num == 3:
            value = _num(v)
        elif num == 4:
            value = _signed(v)
        elif num == 5:
            value = _text(v)
        elif num == 6:
            if not isinstance(v, bytes):  # bytes(n) of a number would allocate n bytes
                raise ValueError("a bytes field of the wrong wire type")
            value = v
        elif num == 7:  # a reference to a stat metadata entry whose name is the value
            value = stat_names.get(_num(v), "")
    return stat_names.get(mid, str(mid)), value


def _metadata_map(buf: bytes) -> tuple[int, bytes]:
    key, value = 0, b""
    for num, _, v in fields(buf):
        if num == 1:
            key = _num(v)
        elif num == 2:
            value = v
    return key, value


def parse_plane(buf: bytes) -> Plane:
    fs = fields(buf)
    plane = Plane(0, "")
    stat_names: dict[int, str] = {}
    event_md: dict[int, tuple[str, str, list[bytes]]] = {}
    for num, _, v in fs:  # metadata first: lines refer to it
        if num == 5:
            k, md = _metadata_map(v)
            name = next((_text(x) for n, _, x in fields(md) if n == 2), "")
            stat_names[k] = name
    for num, _, v in fs:
        if num == 4:
            k, md = _metadata_map(v)
            name, display, mstats = "", "", []
            for n, _, x in fields(md):
                if n == 2:
                    name = _text(x)
                elif n == 4:
                    display = _text(x)
                elif n == 5:
                    mstats.append(x)
            event_md[k] = (name or display, display, mstats)
            for x in mstats:
                sk, sv = _stat(x, stat_names)
                if isinstance(sv, bytes) and sk.replace(" ", "_").lower() == "hlo_proto":
                    plane.blobs[name] = sv
    md_stats: dict[int, dict[str, Any]] = {}
    for num, _, v in fs:
        if num == 1:
            plane.id = _signed(v)
        elif num == 2:
            plane.name = _text(v)
        elif num == 6:
            stat_name, val = _stat(v, stat_names)
            plane.stats[stat_name] = val
        elif num == 3:
            plane.lines.append(_line(v, event_md, md_stats, stat_names))
    return plane


def _line(
    buf: bytes,
    event_md: dict[int, tuple[str, str, list[bytes]]],
    md_stats: dict[int, dict[str, Any]],
    stat_names: dict[int, str],
) -> Line:
    line = Line(0, "")
    ts_ns = 0
    raw_events: list[bytes] = []
    display = ""
    for num, _, v in fields(buf):
        if num == 1:
            line.id = _signed(v)
        elif num == 2:
            line.name = _text(v)
        elif num == 11:
            display = _text(v)
        elif num == 3:
            ts_ns = _signed(v)
        elif num == 4:
            raw_events.append(v)
    line.name = display or line.name
    base_ps = ts_ns * 1000
    for ev in raw_events:
        mid = offset_ps = dur_ps = 0
        stats: dict[str, Any] = {}
        for num, _, v in fields(ev):
            if num == 1:
                mid = _num(v)
            elif num == 2:
                offset_ps = _signed(v)
            elif num == 3:
                dur_ps = _signed(v)
            elif num == 4:
                k, val = _stat(v, stat_names)
                stats[k] = val
        name, display, mstats = event_md.get(mid, (str(mid), "", []))
        if mstats:  # stats kept on the event's metadata (XLA puts hlo_op/hlo_module there)
            if mid not in md_stats:
                md_stats[mid] = dict(_stat(x, stat_names) for x in mstats)
            stats = {**md_stats[mid], **stats}
        start_ps = base_ps + offset_ps
        line.events.append(
            Event(
                name,
                start_ps // 1000,
                (start_ps + dur_ps) // 1000 - start_ps // 1000,
                stats,
                display if display != name else "",
            )
        )
    return line


def parse_xspace(buf: bytes) -> tuple[list[Plane], list[str]]:
    """The planes of an XSpace and its hostnames."""
    planes, hosts = [], []
    for num, _, v in fields(buf):
        if num == 1:
            planes.append(parse_plane(v))
        elif num == 4:
            hosts.append(_text(v))
    return planes, hosts
