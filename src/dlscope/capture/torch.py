"""The PyTorch layer: framework ops, CUDA runtime calls and GPU activity through torch.profiler.

The collector starts when the program imports torch. It runs PyTorch's own profiler (Kineto,
which uses CUPTI for the CUDA side) and, at the end of the recorded window, has Kineto write its
trace into the spool in C++ (``export_chrome_trace``). Finalize reads that file with the Kineto
importer: the slow path (``profiler.events()``, a Python object per event: 9.3 s for 152k events
on an H100 machine) is never taken.

Modes: 'default' records ops, runtime calls and GPU activity; 'full' adds input shapes and memory
events (more overhead, larger traces). Python stacks stay off: PyTorch 2.13 writes Python-frame
names with unescaped quotes (``"file.py(0):  "seed","``), which makes the whole trace invalid JSON.

Sampled detail. Tracing every op and kernel costs as much as torch.profiler does (+30% on a
ResNet-50 step on an H100, measured), so the default mode traces a *window*: from torch's import
through the warm-up step and :data:`DEFAULT_DETAIL_STEPS` steps after it, then stops. The
application layer and hardware counters keep recording every step. Steps the window touched are
flagged ``traced`` and step statistics come from the others, so the step times a user reads are
measured without tracing overhead while ops and kernels still come from real steps. Full mode
and an explicit ``--steps`` window trace every selected step (at most :data:`MAX_TRACED_STEPS`:
Kineto holds everything in memory until the end). The trace is written into the spool as soon
as its window closes, so a program killed later (SIGKILL, the OOM killer) keeps every op, API
call and kernel of the window. The step that pays for writing it lies inside the window's
recorded span, so it is flagged ``traced`` and left out of step statistics like the rest.

Iterations: a program that calls ``prof.step()`` defines them; otherwise every optimizer step
ends one (a global optimizer hook), so an unmodified training script gets steps too. A program
with no steps at all is traced whole.

Modules: from the first traced step after the warm-up to the window's end, global module hooks
record each module call (:mod:`.module_calls`, the ``module_calls`` table); they are removed
before the trace is written, so their cost stays in the traced steps. ``Settings.module_hooks``
turns them off.

Clocks: Kineto stamps events with the Unix-epoch clock. At start the collector brackets a marker
annotation between two reads of the session's clock; at decode, if the marker lies outside the
bracket, every PyTorch event is shifted by the smallest amount that puts it inside.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import CollectorUnavailable
from ..store import spool
from .base import Collector, DecodeContext, Settings
from .import_hooks import cancel, when_imported
from .module_calls import ModuleCallRecorder
from .module_calls import decode as decode_module_calls
from .quiet import filtered_stderr
from .schedule import Action

if TYPE_CHECKING:
    import pyarrow as pa

    from .session import Session

DEFAULT_DETAIL_STEPS = 5
MAX_TRACED_STEPS = 100
CLOCK_MARKER = "dlscope::clock_sync"
TRACE_DOMAIN = "trace"  # phases marking when detailed tracing ran (left out of the breakdown)
WINDOW_NAME = "torch.profiler tracing"
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
        self.last_step: int | None = None  # last step traced (None: no limit)
        self.windows_done: list[dict[str, Any]] = []  # written windows: marker and (start, end, tid)
        self._window_start = 0
        self._hook: Any = None
        self._first_optimizer: int | None = None
        self._marker: tuple[int, int] | None = None
        self._torch: ModuleType | None = None
        self.trace_enabled = True
        self.modules: ModuleCallRecorder | None = None

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self, session: Session) -> None:
        self.session = session
        # with tracing off the collector still runs: its optimizer hook gives unmodified scripts steps
        self.trace_enabled = self.settings.detail_steps != 0
        self.last_step = detail_last_step(self.settings, session.schedule)
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
        if self.session.schedule.action(step) is not Action.SKIP and self._in_window(step):
            self._begin()

    def _in_window(self, step: int) -> bool:
        return self.trace_enabled and (self.last_step is None or step <= self.last_step)

    def _begin(self) -> None:
        torch = self._torch
        assert torch is not None and self.session is not None
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU]
        if self.cuda:
            acts.append(ProfilerActivity.CUDA)
        self.activities = [str(a).split(".")[-1] for a in acts]
        full = self.settings.mode == "full"
        self.prof = profile(activities=acts, record_shapes=full, profile_memory=full)
        clock = self.session.clock
        self._window_start = clock()
        with filtered_stderr():
            self.prof.start()
        a = clock()
        with torch.profiler.record_function(CLOCK_MARKER):
            pass
        self._marker = (a, clock())
        self.recording = True
        self.windows += 1

    def _hook_modules(self) -> None:
        """Install the module hooks (:mod:`.module_calls`) for the rest of the window."""
        if self._torch is None or not self.settings.module_hooks or self.session is None:
            return
        if self.modules is None:
            from .torch_hooks import _compiling_check

            self.modules = ModuleCallRecorder(self._torch, self.session.clock, _compiling_check(self._torch))
        if not self.modules.installed:
            try:
                self.modules.install()
            except Exception as e:  # a torch without global module hooks: the module view is missing
                self.modules.reason_off = f"module hooks unavailable ({e.__class__.__name__}: {e})"

    def _end(self) -> None:
        """Stop tracing and write the window's trace into the spool now: a later SIGKILL must
        not lose it. The window's span ends after the write, so the step that paid for it is
        flagged traced."""
        if not self.recording or self.session is None:
            return
        self.recording = False
        if self.modules is not None and self.modules.installed:
            try:
                self.modules.write(self.session.spool_dir, self.session.pid, self.windows)
            except Exception as e:  # never lose the trace over the module calls
                self.modules.reason_off = f"module calls not written ({e.__class__.__name__}: {e})"
        with filtered_stderr():
            self.prof.stop()
        prof, self.prof = self.prof, None
        self._write(prof, self._marker)

    def _write(self, prof: Any, marker: tuple[int, int] | None) -> None:
        """Export one finished window (under a temporary name, renamed when whole), then rewrite
        the window list atomically: a reader sees only complete traces."""
        assert self.session is not None
        t = time.perf_counter()
        i = len(self.windows_done) + 1
        final = self.session.spool_dir / f"{self.session.pid}.torch.{i}.json"
        tmp = final.with_name(final.name + ".tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, final)
        window = (self._window_start, self.session.clock(), threading.get_native_id())
        self.windows_done.append({"marker": list(marker) if marker else None, "window": list(window)})
        spool.write_json_atomic(
            self.session.spool_dir / f"{self.session.pid}.torch.windows.json", {"windows": self.windows_done}
        )
        self.export_s += time.perf_counter() - t

    def on_step(self, step: int, action: Action) -> None:
        if self._torch is None:
            return
        if self.recording and (action is Action.SKIP or not self._in_window(step)):
            self._end()
        elif not self.recording and action is not Action.SKIP and self.windows == 0 and self._in_window(step):
            self._begin()
        if self.recording and action is Action.RECORD:
            self._hook_modules()

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
        if not self.trace_enabled:
            raise CollectorUnavailable("detailed tracing is off (--detail-steps 0)")

    def describe(self) -> dict[str, Any]:
        torch = self._torch or sys.modules.get("torch")
        out: dict[str, Any] = {
            "mode": self.settings.mode,
            "activities": self.activities,
            "windows": self.windows,
            "export_s": round(self.export_s, 3),
        }
        if torch is not None:
            out["torch"] = getattr(torch, "__version__", "?")
        out["traced_until_step"] = self.last_step
        if self.reason_unavailable:
            out["gpu"] = self.reason_unavailable
        if self.modules is not None:
            out["module_calls"] = self.modules.calls
            if self.modules.reason_off:
                out["module_calls_off"] = self.modules.reason_off
        return out

    # ---- finalize ----------------------------------------------------------------------------
    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from ..importers.kineto import _devices, read_trace

        try:
            windows = json.loads((spool_dir / f"{pid}.torch.windows.json").read_text())
        except (OSError, ValueError):
            windows = []
        if isinstance(windows, dict):  # written atomically as {"windows": [...]}
            windows = windows.get("windows") or []
        from ..store import db

        out: dict[str, list[pa.Table]] = {}
        op_base = 0
        con = db.connect()
        for i, win in enumerate(windows, 1):
            path = spool_dir / f"{pid}.torch.{i}.json"
            if not path.exists():
                continue
            tt = read_trace(
                path, con, f"w{i}_", rank=context.rank, op_base=op_base, with_steps=False, timings=context.timings
            )
            tables = {
                name: pa.concat_tables(
                    [db.query_arrow(con, f"SELECT * FROM {r}") for r in rels], promote_options="default"
                )
                for name, rels in tt.tables.items()
            }
            for rel in tt.backing:  # the event table may be a view over parts
                db.drop(con, rel)
            shift = _clock_shift(win.get("marker"), tables, context.offset_ns)
            if shift:
                context.notes.append(
                    f"process {pid}: PyTorch events shifted by {shift / 1e3:.1f} us to the session clock"
                )
            for name, t in tables.items():
                if shift:
                    t = _shift(t, shift)
                if name == "phases" and t.num_rows:
                    t = t.filter(pc.not_equal(t.column("name"), CLOCK_MARKER))
                out.setdefault(name, []).append(t)
            op_base += tt.counts.get("ops", 0)
            for d in _devices(tt.metadata, context.rank):
                if d not in context.devices:
                    context.devices.append(d)
            for key, label in (("cuda_runtime_version", "cuda_runtime"), ("cuda_driver_version", "cuda_driver")):
                if tt.metadata.get(key) is not None:
                    context.frameworks[label] = str(tt.metadata[key])
        con.close()
        if windows:
            start = [w["window"][0] + context.offset_ns for w in windows]
            end = [w["window"][1] + context.offset_ns for w in windows]
            n = len(windows)
            out.setdefault("phases", []).append(
                pa.table(
                    {
                        "rank": pa.array([context.rank] * n, pa.int32()),
                        "pid": [pid] * n,
                        "tid": [w["window"][2] for w in windows],
                        "start_ns": start,
                        "end_ns": end,
                        "name": [WINDOW_NAME] * n,
                        "kind": ["range"] * n,
                        "source": ["dlscope"] * n,
                        "domain": [TRACE_DOMAIN] * n,
                    }
                )
            )
        calls = decode_module_calls(spool_dir, pid, context.rank, context.offset_ns)
        if calls is not None:
            out["module_calls"] = [calls]
        tables = {k: pa.concat_tables(v, promote_options="default") for k, v in out.items() if v}
        world = context.session.get("world_size")
        if world and tables.get("comms") is not None and tables["comms"].num_rows:
            # a profiler started before init_process_group writes no distributedInfo: the session knows
            c = tables["comms"]
            i = c.schema.get_field_index("group_size")
            tables["comms"] = c.set_column(
                i, "group_size", pc.fill_null(c.column(i), pa.scalar(int(world), c.column(i).type))
            )
        return tables


def detail_last_step(settings: Settings, schedule: Any) -> int | None:
    """The last step the PyTorch layer traces (None: no limit before the window's end)."""
    if settings.detail_steps is not None:
        return int(schedule.start + schedule.warmup + settings.detail_steps - 1)
    if settings.mode == "full" or schedule.windowed:
        last = int(schedule.start + schedule.warmup + MAX_TRACED_STEPS - 1)
        return min(last, int(schedule.stop)) if schedule.stop is not None else last
    return int(schedule.start + schedule.warmup + DEFAULT_DETAIL_STEPS - 1)


def _clock_shift(marker: list[int] | None, tables: dict[str, pa.Table], offset_ns: int) -> int:
    """ns to add to PyTorch times so the clock marker lies inside the session-clock bracket."""

    import pyarrow.compute as pc

    if not marker:
        return 0
    a, b = (int(x) + offset_ns for x in marker)
    ph = tables.get("phases")
    if ph is None or not ph.num_rows:
        return 0
    rows = ph.filter(pc.equal(ph.column("name"), CLOCK_MARKER))
    if not rows.num_rows:
        return 0
    s, e = int(rows.column("start_ns")[0].as_py()), int(rows.column("end_ns")[0].as_py())
    if s < a:
        return a - s
    if e > b:
        return b - e
    return 0


def _shift(t: pa.Table, ns: int) -> pa.Table:

    import pyarrow as pa
    import pyarrow.compute as pc

    for c in _TIME_COLUMNS:
        if c in t.column_names:
            t = t.set_column(t.schema.get_field_index(c), c, pc.add(t.column(c), pa.scalar(ns, pa.int64())))
    return t
