"""The PyTorch layer: framework ops, CUDA runtime calls and GPU activity through torch.profiler.

The collector starts when the program imports torch. It runs PyTorch's own profiler (Kineto,
which uses CUPTI for the CUDA side) and, at the end of the recorded window, has Kineto write its
trace into the spool in C++ (``export_chrome_trace``). Finalize reads that file with the Kineto
importer: the slow path (``profiler.events()``, a Python object per event: 9.3 s for 152k events
on an H100 machine) is never taken.

Modes: 'default' records ops, runtime calls and GPU activity; 'full' adds input shapes, Python
stacks, modules and memory events (more overhead, larger traces).

Iterations: a program that calls ``prof.step()`` defines them; otherwise every optimizer step
ends one (a global optimizer hook), so an unmodified training script gets steps too. Without a
``--steps`` window the PyTorch layer records the first :data:`DEFAULT_MAX_STEPS` steps (Kineto
holds everything in memory until it writes the trace); the application layer records them all.

Clocks: Kineto stamps events with the Unix-epoch clock. At start the collector brackets a marker
annotation between two reads of the session's clock; at decode, if the marker lies outside the
bracket, every PyTorch event is shifted by the smallest amount that puts it inside.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CollectorUnavailable
from ..store import spool
from .base import Collector, DecodeContext, Settings
from .import_hooks import cancel, when_imported
from .quiet import filtered_stderr
from .schedule import Action

if TYPE_CHECKING:
    from .session import Session

DEFAULT_MAX_STEPS = 100
CLOCK_MARKER = "dlscope::clock_sync"
_TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns")


class TorchCollector(Collector):
    name = "torch"
    layers = ("framework", "runtime", "hardware")
    setting = "torch"
    scope = "process"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.session: Session | None = None
        self.prof: Any = None
        self.recording = False
        self.windows = 0
        self.cuda = False
        self.activities: list[str] = []
        self.reason_unavailable = ""
        self.export_s = 0.0
        self.stopped_early = False
        self._hook: Any = None
        self._first_optimizer: int | None = None
        self._marker: tuple[int, int] | None = None
        self._torch: ModuleType | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, session: Session) -> None:
        self.session = session
        when_imported("torch", self._on_torch)

    def _on_torch(self, torch: ModuleType) -> None:
        if self.session is None or self.session.stopped:
            return
        self._torch = torch
        try:
            from torch.profiler import ProfilerActivity  # noqa: F401
        except ImportError as e:
            self.reason_unavailable = f"this torch has no torch.profiler ({e})"
            return
        self.cuda = bool(torch.cuda.is_available())
        if self.cuda and not self.session.claim_cupti(self.name):
            self.cuda = False
            self.reason_unavailable = f"CUPTI is used by {self.session.cupti_owner}; PyTorch GPU activity not recorded"
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        except ImportError:
            pass  # torch < 2.0: iterations only from explicit step() calls
        step = self.session.recorder.step_count
        if self.session.schedule.action(step) is not Action.SKIP:
            self._begin()

    def _begin(self) -> None:
        torch = self._torch
        assert torch is not None and self.session is not None
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if self.cuda:
            acts.append(ProfilerActivity.CUDA)
        self.activities = [str(a).split(".")[-1] for a in acts]
        full = self.settings.mode == "full"
        self.prof = profile(activities=acts, record_shapes=full, profile_memory=full, with_stack=full,
                            with_modules=full)
        with filtered_stderr():
            self.prof.start()
        clock = self.session.clock
        a = clock()
        with torch.profiler.record_function(CLOCK_MARKER):
            pass
        self._marker = (a, clock())
        self.recording = True
        self.windows += 1

    def _end(self) -> None:
        if not self.recording or self.session is None:
            return
        self.recording = False
        t = time.perf_counter()
        with filtered_stderr():
            self.prof.stop()
        path = self.session.spool_dir / f"{self.session.pid}.torch.{self.windows}.json"
        self.prof.export_chrome_trace(str(path))
        self.export_s += time.perf_counter() - t
        marker = self.session.spool_dir / f"{self.session.pid}.torch.{self.windows}.marker"
        if self._marker is not None:
            marker.write_text(f"{self._marker[0]} {self._marker[1]}\n")
        self.prof = None

    def on_step(self, step: int, action: Action) -> None:
        if self._torch is None:
            return
        if self.recording and action is Action.SKIP:
            self._end()
        elif self.recording and not self.settings.steps and step >= DEFAULT_MAX_STEPS:
            self.stopped_early = True
            self._end()
        elif not self.recording and action is not Action.SKIP and self.windows == 0:
            self._begin()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # One iteration may step several optimizers (a GAN's two): the first one seen counts.
        if self._first_optimizer is None:
            self._first_optimizer = id(optimizer)
        if id(optimizer) == self._first_optimizer and self.session is not None:
            self.session.step(spool.STEP_OPTIMIZER)

    def stop(self) -> None:
        cancel("torch", self._on_torch)
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._end()
        if self._torch is None:
            raise CollectorUnavailable("the program never imported torch")

    def describe(self) -> dict[str, Any]:
        torch = self._torch or sys.modules.get("torch")
        out: dict[str, Any] = {"mode": self.settings.mode, "activities": self.activities,
                               "windows": self.windows, "export_s": round(self.export_s, 3)}
        if torch is not None:
            out["torch"] = getattr(torch, "__version__", "?")
        if not self.settings.steps:
            out["max_steps"] = DEFAULT_MAX_STEPS
        if self.stopped_early:
            out["note"] = f"the PyTorch layer recorded the first {DEFAULT_MAX_STEPS} steps; use --steps A:B for another window"
        if self.reason_unavailable:
            out["gpu"] = self.reason_unavailable
        return out

    # ---- finalize ----------------------------------------------------------------------------
    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        from ..importers.kineto import read_trace

        out: dict[str, list[pa.Table]] = {}
        op_base = 0
        for path in sorted(spool_dir.glob(f"{pid}.torch.*.json")):
            tt = read_trace(path, rank=context.rank, op_base=op_base, with_steps=False)
            shift = _clock_shift(path.with_suffix(".marker"), tt.tables, context.offset_ns)
            if shift:
                context.notes.append(f"process {pid}: PyTorch events shifted by {shift / 1e3:.1f} us to the session clock")
            for name, t in tt.tables.items():
                if shift:
                    t = _shift(t, shift)
                if name == "phases" and t.num_rows:
                    t = t.filter(pc.not_equal(t.column("name"), CLOCK_MARKER))
                out.setdefault(name, []).append(t)
            op_base += tt.tables["ops"].num_rows if "ops" in tt.tables else 0
            from ..importers.kineto import _devices

            for d in _devices(tt.metadata, context.rank):
                if d not in context.devices:
                    context.devices.append(d)
            for key, label in (("cuda_runtime_version", "cuda_runtime"), ("cuda_driver_version", "cuda_driver")):
                if tt.metadata.get(key) is not None:
                    context.frameworks[label] = str(tt.metadata[key])
        return {k: pa.concat_tables(v, promote_options="default") for k, v in out.items() if v}


def _clock_shift(marker_path: Path, tables: dict[str, pa.Table], offset_ns: int) -> int:
    """ns to add to PyTorch times so the clock marker lies inside the session-clock bracket."""
    try:
        a, b = (int(x) + offset_ns for x in marker_path.read_text().split())
    except (OSError, ValueError):
        return 0
    ph = tables.get("phases")
    if ph is None or not ph.num_rows:
        return 0
    rows = ph.filter(pc.equal(ph.column("name"), CLOCK_MARKER))
    if not rows.num_rows:
        return 0
    s, e = rows.column("start_ns")[0].as_py(), rows.column("end_ns")[0].as_py()
    if s < a:
        return a - s
    if e > b:
        return b - e
    return 0


def _shift(t: pa.Table, ns: int) -> pa.Table:
    for c in _TIME_COLUMNS:
        if c in t.column_names:
            t = t.set_column(t.schema.get_field_index(c), c, pc.add(t.column(c), pa.scalar(ns, pa.int64())))
    return t
