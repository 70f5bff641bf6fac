"""Where each XLA op comes from: the JAX op path and source line of every HLO instruction, read
from the HloProto that jax.profiler stores per compiled module in the trace's metadata plane.

Decoded from the protobuf wire format (field numbers from XLA's ``hlo.proto``): each
instruction's ``OpMetadata`` has ``op_name`` (``jit(train_step)/jvp()/dot_general``) and a
``stack_frame_id`` into the module's ``StackFrameIndexProto`` (1-based ids: frame -> file
location -> file name, function name, line). The innermost frame is the program's own line (JAX
leaves its internal frames out). Older XLA put ``source_file``/``source_line`` on the metadata
itself: read too.
"""

from __future__ import annotations

import os

from .xplane_pb import fields


def _text(b: object) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, (bytes, bytearray)) else ""


def _frames(index: bytes) -> dict[int, str]:
    """stack frame id -> 'file.py:line function'."""
    files: list[str] = []
    funcs: list[str] = []
    locs: list[tuple[int, int, int]] = []
    frames: list[int] = []
    for num, _, v in fields(index):
        if num == 1:
            files.append(_text(v))
        elif num == 2:
            funcs.append(_text(v))
        elif num == 3:
            f = {n: x for n, _, x in fields(v)}
            locs.append((int(f.get(1, 0)), int(f.get(2, 0)), int(f.get(3, 0))))
        elif num == 4:
            f = {n: x for n, _, x in fields(v)}
            frames.append(int(f.get(1, 0)))
    out: dict[int, str] = {}
    for i, loc_id in enumerate(frames, 1):
        if 0 < loc_id <= len(locs):
            file_id, func_id, line = locs[loc_id - 1]
            file = os.path.basename(files[file_id - 1]) if 0 < file_id <= len(files) else "?"
            func = funcs[func_id - 1] if 0 < func_id <= len(funcs) else ""
            out[i] = f"{file}:{line} {func}".strip()
    return out


def hlo_sources(hlo_proto: bytes) -> tuple[str, dict[str, str]]:
    """(module name, {instruction name: 'op_name (file.py:line function)'})."""
    module = next((v for num, _, v in fields(hlo_proto) if num == 1), b"")
    mf = fields(module)
    name = next((_text(v) for num, _, v in mf if num == 1), "")
    index = next((v for num, _, v in mf if num == 17), None)
    frames = _frames(index) if index else {}
    out: dict[str, str] = {}
    for num, _, comp in mf:
        if num != 3:
            continue
        for cnum, _, ins in fields(comp):
            if cnum != 2:
                continue
            f = fields(ins)
            iname = next((_text(v) for n, _, v in f if n == 1), "")
            md = next((v for n, _, v in f if n == 7), None)
            if not iname or md is None:
                continue
            m = {n: v for n, _, v in fields(md)}
            op_name = _text(m.get(2))
            where = frames.get(int(m.get(15, 0) or 0), "")
            if not where and m.get(3):
                where = f"{os.path.basename(_text(m.get(3)))}:{int(m.get(4, 0) or 0)}"
            text = f"{op_name} ({where})" if op_name and where else op_name or where
            if text:
                out[iname] = text
    return name, out
