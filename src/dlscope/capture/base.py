"""The interface every collector implements, and the settings they read.

A collector records one source (the PyTorch profiler, NVML, CUPTI ...) inside a recording
:class:`~dlscope.capture.session.Session`. It is started and stopped by the session, told of
every step boundary, writes what it captured into the session's spool directory, and at finalize
turns that spool into named tables (:meth:`Collector.decode`). A collector that cannot run here
raises :class:`~dlscope.errors.CollectorUnavailable` from ``start`` with the reason; the profile
then says that layer is missing and why.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..vocabulary.names import FixName
from .schedule import Action

if TYPE_CHECKING:
    import pyarrow as pa

    from .session import Session


@dataclass
class TryRun:
    """What one run of ``dlscope try`` asks of the program (read by the fix injector,
    :mod:`.fix_injector`): the fixes to apply, what try knows for each, where to stop."""

    fixes: list[FixName] = field(default_factory=list)  # each in capture.fixes.BY_NAME
    # per fix, what try knows for it (FixContext.options): the advice's predicted saving
    fix_options: dict[FixName, dict[str, Any]] = field(default_factory=dict)
    stop_after_step: int | None = None  # the run ends after this step (its measured steps are done)
    record_loss: bool = False  # keep the scalar losses, to flag a fix that changes the numerics

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TryRun:
        """From :meth:`Settings.to_dict`'s JSON: the fixes' names become :class:`FixName` again
        (a name that is none raises ValueError: parent and child are the same dlscope)."""
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["fixes"] = [FixName(n) for n in d.get("fixes", [])]
        d["fix_options"] = {FixName(n): dict(o) for n, o in d.get("fix_options", {}).items()}
        return cls(**d)


@dataclass
class Settings:
    """Everything a user can ask of a recording (API keywords and `dlscope profile` flags)."""

    batch_size: int | None = None
    steps: tuple[int | None, int | None] | None = None  # inclusive window
    warmup: int | None = None  # None: 1 step without a window, 0 with one
    mode: str = "default"  # 'default' (low overhead) or 'full' (input shapes, memory events)
    detail_steps: int | None = None  # steps traced in detail; None: 5 in default mode, all in full
    torch: str = "auto"  # auto | on | off
    nvml: str = "auto"
    cupti: str = "auto"
    jax: str = "auto"  # the JAX layer (jax.profiler)
    tensorflow: str = "auto"  # the TensorFlow layer (tf.profiler.experimental)
    nvtx: bool = False
    key_node: str | None = None
    flush_interval_s: float = 1.0
    sample_interval_ms: int = 50
    gpm_interval_ms: float | None = None  # NVML GPM's window (None: the collector's, capture.nvml)
    live: bool = False  # the `dlscope profile` parent shows the live line: the processes feed it
    quiet: bool = False  # --quiet: the user turned the live line off (meta.json says so)
    try_run: TryRun | None = None  # a run of `dlscope try`
    # for tests and benchmarks: an NVML module with pynvml's names; the PyTorch hooks' phases and
    # their GPU marks (on unless turned off)
    nvml_module: str = "pynvml"
    phase_hooks: bool = True
    phase_gpu: bool = True
    module_hooks: bool = True  # the module calls of the traced steps (capture.module_calls)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: it crosses the process boundary (``DLSCOPE_SESSION``) and goes in meta.json."""
        d = asdict(self)
        d["steps"] = list(self.steps) if self.steps else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Settings:
        d = dict(d)
        if d.get("steps") is not None:
            d["steps"] = tuple(d["steps"])
        if isinstance(d.get("try_run"), dict):
            d["try_run"] = TryRun.from_dict(d["try_run"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


class Collector:
    """Base class. Subclasses set ``name`` and ``layers`` and override what they need."""

    name: ClassVar[str] = ""
    layers: ClassVar[tuple[str, ...]] = ()
    setting: ClassVar[str] = ""  # the Settings field that turns it on/off ('auto'|'on'|'off')
    scope: ClassVar[str] = "process"  # 'process': runs in each profiled process; 'host': once per run

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def wanted(self) -> bool:
        return not self.setting or getattr(self.settings, self.setting, "auto") != "off"

    def off_reason(self) -> str:
        """Why :meth:`wanted` said no, for meta.json: a collector that runs only when asked for
        (nvtx, fixes) is off by default, not turned off by the user."""
        if self.setting and getattr(self.settings, self.setting, "auto") == "off":
            return "turned off by the user"
        return "off (default)"

    def start(self, session: Session) -> None:
        """Begin recording, or raise CollectorUnavailable(reason)."""

    def on_step(self, step: int, action: Action) -> None:
        """Called at each step boundary with the index of the step that begins."""

    def before_flush(self) -> None:
        """Called at each flush before the application recorder's events are drained."""

    def flush(self) -> None:
        """Write what is buffered to the spool (called about once a second)."""

    def stop(self) -> None:
        """Stop recording and write everything still buffered."""

    def describe(self) -> dict[str, Any]:
        """Settings worth keeping in meta.json."""
        return {}

    def dropped(self) -> int:
        """Records lost (buffer overflow and the like)."""
        return 0

    def outcome(self) -> tuple[str, str] | None:
        """(status, reason) to record instead of 'ok' when the collector started but ended up
        recording nothing (e.g. it waited for a framework the program never imported); asked
        once, after ``stop``. None keeps 'ok'."""
        return None

    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        """Turn this collector's spool files for ``pid`` into named tables (text name columns)."""
        return {}


@dataclass
class DecodeContext:
    """What finalize knows about one recording process."""

    pid: int
    rank: int
    offset_ns: int  # monotonic -> epoch
    session: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    devices: list[dict[str, Any]] = field(default_factory=list)
    frameworks: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # decode stage -> seconds
    steps_completed: int = 0  # step boundaries the process recorded, those outside --steps included
    last_step_ns: int | None = None  # when its last step ended (epoch ns)
