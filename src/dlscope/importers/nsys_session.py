"""What an nsys export says about its session: the clock, the GPUs, the host and the command.

nsys timestamps count nanoseconds on the session's clock, which starts at the session start;
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is that start as Unix epoch ns. Adding it converts
every timestamp without touching differences between them (relative times stay exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .nsys_db import NsysExport

SESSION_START = "TARGET_INFO_SESSION_START_TIME"


@dataclass(frozen=True)
class SessionClock:
    """``epoch_ns = session_ns + offset_ns``. ``source`` says where the offset came from."""

    offset_ns: int
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"offset_ns": self.offset_ns, "source": self.source, "session_start_ns": self.offset_ns}


def session_clock(x: NsysExport) -> SessionClock:
    if x.has(SESSION_START, "utcEpochNs"):
        v = x.scalar(f"SELECT utcEpochNs FROM {SESSION_START} WHERE utcEpochNs IS NOT NULL LIMIT 1")
        if v is not None:
            return SessionClock(int(v), f"{SESSION_START}.utcEpochNs")
    return SessionClock(0, "none: the export has no session start time; times are nsys session time")


def session_span(x: NsysExport) -> tuple[int, int] | None:
    """(start, stop) of the capture in session ns, from ANALYSIS_DETAILS when present."""
    if x.has("ANALYSIS_DETAILS", "startTime", "stopTime"):
        r = x.rows("SELECT min(startTime), max(stopTime) FROM ANALYSIS_DETAILS")
        if r and r[0][0] is not None and r[0][1] is not None:
            return int(r[0][0]), int(r[0][1])
    return None


def devices(x: NsysExport) -> list[dict[str, Any]]:
    """One dict per GPU in TARGET_INFO_GPU, with the CUDA index processes saw it as."""
    if not x.has("TARGET_INFO_GPU", "id"):
        return []
    cuda_ids: dict[int, list[int]] = {}
    if x.has("TARGET_INFO_CUDA_DEVICE", "gpuId", "cudaId"):
        for gpu, cuda in x.rows("SELECT DISTINCT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE"):
            cuda_ids.setdefault(int(gpu), []).append(int(cuda))
    fields = {
        "name": "name",
        "sms": "smCount",
        "memory_bytes": "totalMemory",
        "uuid": "uuid",
        "bus": "busLocation",
        "clock_hz": "clockRate",
        "memory_bandwidth_Bps": "memoryBandwidth",
        "l2_bytes": "l2CacheSize",
        "chip": "chipName",
        "cc_major": "computeMajor",
        "cc_minor": "computeMinor",
    }
    present = {k: c for k, c in fields.items() if x.has("TARGET_INFO_GPU", c)}
    cols = ", ".join(["id"] + list(present.values()))
    out = []
    for row in x.rows(f"SELECT {cols} FROM TARGET_INFO_GPU ORDER BY id"):
        gpu_id = int(row[0])
        d: dict[str, Any] = {"index": (cuda_ids.get(gpu_id) or [gpu_id])[0], "nsys_gpu_id": gpu_id}
        d.update({k: v for k, v in zip(present, row[1:]) if v not in (None, "")})
        if "cc_major" in d and "cc_minor" in d:
            d["compute_capability"] = f"{d.pop('cc_major')}.{d.pop('cc_minor')}"
        out.append(d)
    return out


def host_name(x: NsysExport) -> str:
    if x.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        v = x.scalar("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        if v:
            return str(v)
    return ""


def command(x: NsysExport) -> list[str] | None:
    """The profiled command line, from META_DATA_CAPTURE (PROCESS_0:COMMAND, :ARGUMENT_n)."""
    if not x.has("META_DATA_CAPTURE", "name", "value"):
        return None
    rows = x.rows("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%'")
    cmd = [str(v) for n, v in rows if n == "PROCESS_0:COMMAND" and v]
    args: list[tuple[int, str]] = []
    for n, v in rows:
        tail = str(n).rsplit(":ARGUMENT_", 1)
        if len(tail) == 2 and tail[1].isdigit():
            args.append((int(tail[1]), str(v)))
    return (cmd[:1] + [v for _, v in sorted(args)]) if cmd else None


def driver_version(x: NsysExport) -> str | None:
    if x.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        v = x.scalar("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'NvDriverVersion' LIMIT 1")
        return str(v) if v else None
    return None
