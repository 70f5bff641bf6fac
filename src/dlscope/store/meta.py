"""``meta.json``: what a profile is, how it was made, and what it lacks."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import ProfileFormatError
from .schema import MAX_TIME_NS
from .version import FORMAT_NAME, FORMAT_VERSION


@dataclass
class CollectorStatus:
    """One collector's outcome. ``status`` is 'ok', 'unavailable' (cannot run here: ``reason``
    says why), 'off' (not asked for), or 'failed' (started, then broke: ``reason``)."""

    status: str
    reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankEnd:
    """How one rank of a distributed job ended. ``exit_code``/``signal`` as the launcher that
    waited for it saw them (torchrun's agent: ``capture.child_exits``), else what the rank itself
    wrote when it stopped (a SIGTERM it handled); both None when nothing saw it end (a rank
    SIGKILLed under a launcher dlscope does not watch)."""

    rank: int
    pid: int
    exit_code: int | None = None  # the shell's convention: 128 + N when killed by signal N
    signal: int | None = None
    clean_stop: bool = True  # the rank stopped its recording itself (False: killed, its data ends at the kill)
    end_ns: int | None = None  # when it ended (Unix epoch ns): as its launcher saw it, else its own last word
    steps_completed: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.exit_code) or self.signal is not None or not self.clean_stop


@dataclass
class RunEnd:
    """How the profiled program ended, as the process that waited for it saw it (the
    ``dlscope profile`` parent): one record per run. A distributed job's record also says how
    each rank ended (``ranks``), so that a rank that died says how, when, and after which step."""

    exit_code: int | None = None  # the shell's convention: 128 + N when killed by signal N
    signal: int | None = None  # the signal that killed it, if one did
    last_stderr_line: str = ""  # the last non-empty line the program wrote to stderr (its error, mostly)
    steps_completed: int = 0  # steps the program finished (prof.step() calls, or optimizer steps)
    ranks: list[RankEnd] = field(default_factory=list)  # a distributed job's ranks, by rank (else empty)

    @property
    def failed(self) -> bool:
        return bool(self.exit_code) or self.signal is not None or bool(self.failed_ranks)

    @property
    def failed_ranks(self) -> list[RankEnd]:
        return [r for r in self.ranks if r.failed]

    @property
    def failed_before_first_step(self) -> bool:
        return self.failed and self.steps_completed == 0


@dataclass
class Meta:
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    dlscope_version: str = ""
    source: str = "recorded"  # 'recorded' or 'imported:<importer>'
    inputs: list[str] = field(default_factory=list)
    command: list[str] | None = None
    host: str = ""
    start_ns: int | None = None
    end_ns: int | None = None
    exit_code: int | None = None
    ranks: list[int] = field(default_factory=lambda: [0])
    world_size: int | None = None  # ranks in the job, when it was distributed (may exceed those recorded)
    devices: list[dict[str, Any]] = field(default_factory=list)
    frameworks: dict[str, str] = field(default_factory=dict)
    collectors: dict[str, CollectorStatus] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    clock: dict[str, Any] = field(default_factory=lambda: {"domain": "unix_epoch_ns"})
    batch_size: int | None = None
    # where batch_size came from: 'given' (--batch-size, dlscope.profile(batch_size=...)),
    # 'DataLoader.batch_size' or 'first batch' (capture/batch_size.py); None in older profiles
    batch_size_source: str | None = None
    warmup_steps: int = 0
    step_window: list[int | None] | None = None
    key_node: str | None = None
    notes: list[str] = field(default_factory=list)
    table_rows: dict[str, int] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)  # how long building this profile took, by stage
    run_end: RunEnd | None = None  # how the program ended (None: not recorded by `dlscope profile`, or imported)

    def timed(self, stage: str, seconds: float) -> None:
        self.timings_s[stage] = round(self.timings_s.get(stage, 0.0) + seconds, 4)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["collectors"] = {k: asdict(v) for k, v in self.collectors.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Meta:
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known}
        kwargs["collectors"] = {
            k: CollectorStatus(**{kk: vv for kk, vv in v.items() if kk in ("status", "reason", "settings")})
            for k, v in (d.get("collectors") or {}).items()
        }
        if isinstance(d.get("run_end"), dict):
            end = {k: v for k, v in d["run_end"].items() if k in RUN_END_TYPES}
            end["ranks"] = [
                RankEnd(**{k: v for k, v in r.items() if k in RANK_END_TYPES}) for r in end.get("ranks") or []
            ]
            kwargs["run_end"] = RunEnd(**end)
        devices = kwargs.pop("devices", None) or []
        for name in ("start_ns", "end_ns"):  # a time the row rule would call malformed is unknown
            v = kwargs.get(name)
            if isinstance(v, int) and not 0 <= v <= MAX_TIME_NS:
                kwargs[name] = None
        meta = cls(**kwargs)
        for dev in devices:  # profiles written before devices were merged may list a GPU twice
            if isinstance(dev, dict):
                meta.add_device(dev)
        return meta

    def add_device(self, device: dict[str, Any]) -> None:
        """Add a GPU's description, merged with what another source said of the same GPU (same
        rank and index: PyTorch's device properties and NVML describe the same card). A key the
        commands read whose value has the wrong type (a trace's ``"id": "abc"``, a damaged
        meta.json) is left out, as if the source had not said it."""
        device = {
            k: v
            for k, v in device.items()
            if k not in DEVICE_TYPES or _is(v, DEVICE_TYPES[k]) or (k == "compute_capability" and _is(v, "float"))
        }
        key = (device.get("rank", 0) or 0, device.get("index"))
        for d in self.devices:
            if (d.get("rank", 0) or 0, d.get("index")) == key and key[1] is not None:
                for k, v in device.items():
                    if d.get(k) is None and v is not None:
                        d[k] = v
                return
        self.devices.append(dict(device))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def load_meta(path: Path) -> Meta:
    """Read and validate ``meta.json``; any problem is a ProfileFormatError with one line."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileFormatError(f"{path.parent}: not a dlscope profile (no meta.json)") from None
    except (OSError, ValueError) as e:
        raise ProfileFormatError(f"{path}: unreadable or corrupt meta.json ({e.__class__.__name__})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME:
        raise ProfileFormatError(f"{path.parent}: not a dlscope profile (meta.json is foreign)")
    version = raw.get("format_version")
    if not isinstance(version, int):
        raise ProfileFormatError(f"{path}: corrupt meta.json (no format_version)")
    if version > FORMAT_VERSION:
        raise ProfileFormatError(
            f"{path.parent}: written in profile format {version}, this dlscope reads up to "
            f"{FORMAT_VERSION}; upgrade dlscope"
        )
    problem = shape_problem(raw)
    if problem:
        raise ProfileFormatError(f"{path}: corrupt meta.json ({problem})")
    try:
        return Meta.from_dict(raw)
    except (TypeError, ValueError, AttributeError) as e:
        raise ProfileFormatError(f"{path}: corrupt meta.json ({e})") from None


# ---- the shape of meta.json ---------------------------------------------------------------------
# Every field's JSON type, checked before the commands read it (a list where a dict belongs would
# otherwise break a report halfway). "int" excludes booleans and is within int64; "float" takes ints.

_INT64 = (-(2**63), 2**63)


def _is(value: Any, kind: str) -> bool:
    if kind.endswith("?"):
        return value is None or _is(value, kind[:-1])
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value < _INT64[1]
    if kind == "float":
        return _is(value, "int") or (isinstance(value, float) and value == value and abs(value) != float("inf"))
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "dict":
        return isinstance(value, dict)
    if kind == "list":
        return isinstance(value, list)
    if kind.startswith("list[") and kind.endswith("]"):
        return isinstance(value, list) and all(_is(v, kind[5:-1]) for v in value)
    if kind.startswith("dict[") and kind.endswith("]"):
        return isinstance(value, dict) and all(_is(v, kind[5:-1]) for v in value.values())
    raise AssertionError(kind)


FIELD_TYPES: dict[str, str] = {
    "format": "str",
    "format_version": "int",
    "dlscope_version": "str",
    "source": "str",
    "inputs": "list[str]",
    "command": "list[str]?",
    "host": "str",
    "start_ns": "int?",
    "end_ns": "int?",
    "exit_code": "int?",
    "ranks": "list[int]",
    "world_size": "int?",
    "devices": "list",
    "frameworks": "dict[str]",
    "collectors": "dict[dict]",
    "dropped": "dict[int]",
    "clock": "dict",
    "batch_size": "float?",
    "batch_size_source": "str?",
    "warmup_steps": "int",
    "step_window": "list[int?]?",
    "key_node": "str?",
    "notes": "list[str]",
    "table_rows": "dict[int]",
    "timings_s": "dict[float]",
    "run_end": "dict?",
}
# the keys of a device (Meta.add_device leaves out those of the wrong type) and of a collector
# that the commands read, and their types
# (an index of null is left out too: the GPU's number is unknown, as when the source did not say it)
DEVICE_TYPES = {
    "rank": "int?",
    "index": "int",
    "nvml_index": "int?",
    "name": "str?",
    "memory_bytes": "int?",
    "sms": "int?",
    "compute_capability": "str?",
    "uuid": "str?",
    "host": "str?",
    "source": "str?",
    "pci_bus_id": "str?",
    "driver": "str?",
    "cuda_driver": "str?",
    "gpm": "bool?",
}
COLLECTOR_TYPES = {"status": "str", "reason": "str", "settings": "dict"}
RUN_END_TYPES = {
    "exit_code": "int?",
    "signal": "int?",
    "last_stderr_line": "str",
    "steps_completed": "int",
    "ranks": "list[dict]",
}
RANK_END_TYPES = {
    "rank": "int",
    "pid": "int",
    "exit_code": "int?",
    "signal": "int?",
    "clean_stop": "bool",
    "end_ns": "int?",
    "steps_completed": "int",
}


def shape_problem(raw: dict[str, Any]) -> str | None:
    """What is wrong with the JSON types of ``meta.json``'s fields (None: nothing)."""

    def wrong(name: str, value: Any, kind: str) -> str:
        return f"{name} is {json.dumps(value)[:40]}, not {kind.replace('?', ' or null')}"

    for name, kind in FIELD_TYPES.items():
        if name in raw and not _is(raw[name], kind):
            return wrong(name, raw[name], kind)
    for name, col in (raw.get("collectors") or {}).items():
        for key, kind in COLLECTOR_TYPES.items():
            if key in col and not _is(col[key], kind):
                return wrong(f"collectors.{name}.{key}", col[key], kind)
        if "status" not in col:
            return f"collectors.{name} has no status"
    end = raw.get("run_end") or {}
    for key, kind in RUN_END_TYPES.items():
        if key in end and not _is(end[key], kind):
            return wrong(f"run_end.{key}", end[key], kind)
    for i, rank in enumerate(end.get("ranks") or []):
        for key, kind in RANK_END_TYPES.items():
            if key in rank and not _is(rank[key], kind):
                return wrong(f"run_end.ranks[{i}].{key}", rank[key], kind)
        if not {"rank", "pid"} <= set(rank):
            return f"run_end.ranks[{i}] has no rank or pid"
    return None
