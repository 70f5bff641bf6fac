"""CUDA activity for programs that do not use PyTorch: kernels, memcpy, memset, runtime and driver
API calls and synchronization, from CUPTI, for CuPy, JAX, TensorFlow, Numba, TensorRT or raw
CUDA programs.

A process has one CUPTI client at a time, and PyTorch's profiler (Kineto) is one. So:

* ``cupti='on'`` claims CUPTI and starts tracing at session start;
* ``cupti='auto'`` (the default) starts nothing at session start (under ``dlscope profile`` the
  session starts before the program has imported anything): it waits, with a post-import hook,
  for a CUDA framework other than PyTorch (:data:`FRAMEWORKS`) and then starts tracing, unless
  torch is already imported (the PyTorch layer owns CUPTI then) or CUPTI is claimed;
* if a tool already holds CUPTI (nsys, ncu, compute-sanitizer), the layer is unavailable and
  meta.json says which tool; the program runs on untouched.

The tracing itself is :mod:`dlscope.capture.cupti_activity`; the spool format and decoding are
:mod:`dlscope.capture.cupti_records`.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import CollectorUnavailable
from . import cupti_records as cr
from . import nvml_api
from .base import Collector, DecodeContext, Settings
from .import_hooks import cancel, when_imported

if TYPE_CHECKING:
    import pyarrow as pa

    from .cupti_activity import ActivityTracer
    from .session import Session

OWNER = "cupti"
NO_GPU = "no NVIDIA GPU on this machine"
WINDOW_NAME = "CUPTI tracing"
TRACE_DOMAIN = "trace"  # finalize.TRACE_DOMAIN: phases marking when detailed tracing ran

# Modules whose import means "this program runs CUDA without PyTorch". Submodules where the
# top-level package is not CUDA-specific (numba, pycuda.autoinit/driver, cuda-python's bindings).
FRAMEWORKS: tuple[str, ...] = (
    "cupy",
    "jax",
    "tensorflow",
    "numba.cuda",
    "pycuda.driver",
    "cuda.bindings.runtime",
    "cuda.bindings.driver",
    "cuda.core",
    "tensorrt",
    "onnxruntime",
)

# Frameworks whose own profiler (run by dlscope's layer for them) drives CUPTI: the Settings field
# that turns the layer off, and the profiler's name.
OWN_PROFILER: dict[str, tuple[str, str]] = {"jax": ("jax", "jax.profiler"), "tensorflow": ("tensorflow", "tf.profiler")}


class CuptiCollector(Collector):
    name: ClassVar[str] = "cupti"
    layers: ClassVar[tuple[str, ...]] = ("runtime", "hardware")
    setting: ClassVar[str] = "cupti"
    scope: ClassVar[str] = "process"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.mode = str(settings.cupti)
        self.state = "idle"  # idle | waiting | tracing | skipped | unavailable | failed
        self.reason = ""
        self.trigger = ""
        self._session: Session | None = None
        self._watching = False
        self._tracer: ActivityTracer | None = None  # kept after stop, for its counts
        self._stopped = False
        self._lock = threading.RLock()  # the hook may fire again from inside a start
        # for tests: a callable(spool_dir, pid, clock) -> tracer with start/flush/stop
        self._make_tracer: Callable[..., ActivityTracer] | None = None

    # ---- lifecycle ----------------------------------------------------------------------------
    def start(self, session: Session) -> None:
        self._session = session
        if self.mode == "on":
            self._begin("cupti='on'")
            if self.state != "tracing":
                raise CollectorUnavailable(self.reason)
            return
        present = [m for m in FRAMEWORKS if m in sys.modules]
        if present:
            self._framework_imported(present[0])
            return
        self.state = "waiting"
        self._watching = True
        for name in FRAMEWORKS:
            when_imported(name, self._on_import)

    def _on_import(self, module: Any) -> None:
        self._framework_imported(module.__name__)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            for name in FRAMEWORKS:
                cancel(name, self._on_import)

    def _framework_imported(self, module: str) -> None:
        with self._lock:
            if self.state not in ("idle", "waiting"):
                return
            self._unwatch()
            if "torch" in sys.modules and self.settings.torch != "off":
                self.state, self.reason = (
                    "skipped",
                    f"{module} was imported after torch: CUPTI is left to the PyTorch layer",
                )
                return
            layer = OWN_PROFILER.get(module.split(".")[0])
            if layer and getattr(self.settings, layer[0], "auto") != "off":
                self.state, self.reason = (
                    "skipped",
                    f"{module} was imported: its own profiler ({layer[1]}) records the GPU, CUPTI is left to it",
                )
                return
            self._begin(f"import {module}")

    def _begin(self, trigger: str) -> None:
        session = self._session
        assert session is not None
        self.trigger = trigger
        if not session.claim_cupti(OWNER):
            self.state = "unavailable"
            self.reason = f"CUPTI is already used in this process by {session.cupti_owner}"
            return
        make = self._make_tracer or _real_tracer
        tracer = make(session.spool_dir, session.pid, session.clock)
        try:
            tracer.start()
        except CollectorUnavailable as e:
            session.release_cupti(OWNER)
            self.state, self.reason = "unavailable", str(e)
            return
        except Exception as e:  # a collector must never break the program
            session.release_cupti(OWNER)
            self.state, self.reason = "failed", f"{e.__class__.__name__}: {e}"
            return
        self._tracer = tracer
        self.state = "tracing"

    def flush(self) -> None:
        tracer = self._tracer
        if tracer is not None and not self._stopped:
            tracer.flush()

    def stop(self) -> None:
        self._unwatch()
        with self._lock:  # an import on another thread must not start tracing now
            if self.state == "waiting":
                self.state = "idle"
                self.reason = "waiting"
        if self._tracer is not None and not self._stopped:
            self._stopped = True
            try:
                self._tracer.stop()
            finally:
                if self._session is not None:
                    self._session.release_cupti(OWNER)

    # ---- what meta.json says --------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "state": self.state}
        if self.trigger:
            out["started_by"] = self.trigger
        if self._tracer is not None:
            if getattr(self._tracer, "preloaded", None):
                out["libcupti_preloaded"] = self._tracer.preloaded
            out["records"] = dict(getattr(self._tracer, "records", {}))
            sizes = getattr(self._tracer, "record_bytes", None)
            if sizes is not None:
                out["record_bytes"] = sizes()
            if getattr(self._tracer, "untraced", None):
                out["api_not_traced"] = list(self._tracer.untraced)
        return out

    def dropped(self) -> int:
        return int(getattr(self._tracer, "dropped", 0) or 0)

    def outcome(self) -> tuple[str, str] | None:
        if self.state == "tracing":
            return None
        if self.state == "waiting" or (self.state == "idle" and self.reason == "waiting"):
            if nvml_api.driver_missing():  # the first thing to know on a machine without a GPU
                return "unavailable", NO_GPU
            return (
                "off",
                "auto: the program imported no CUDA framework other than PyTorch ("
                + ", ".join(FRAMEWORKS[:4])
                + " ...)",
            )
        if self.state == "skipped":
            return "off", f"auto: {self.reason}"
        return self.state if self.state in ("unavailable", "failed") else "off", self.reason

    # ---- finalize -------------------------------------------------------------------------------
    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        path = spool_dir / f"{pid}.cupti.spool"
        try:
            header = json.loads((spool_dir / f"{pid}.cupti.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not path.exists():
            return {}
        blocks, torn = cr.read_blocks(path)
        if torn:
            context.notes.append(f"process {pid}: the CUPTI spool ended inside a write (killed while flushing)")
        for e in header.get("errors", [])[:3]:
            context.notes.append(f"process {pid}: cupti: {e}")
        kernels, apis = cr.read_names(spool_dir / f"{pid}.cupti.names.jsonl")
        tables = cr.decode_tables(
            blocks, header, kernels, apis, rank=context.rank, pid=pid, offset_ns=context.offset_ns
        )
        window = _window_phase(header, tables, context, pid)
        if window is not None:
            tables["phases"] = window
        return tables


def _window_phase(
    header: dict[str, Any], tables: dict[str, pa.Table], context: DecodeContext, pid: int
) -> pa.Table | None:
    """When tracing ran, as a phase of domain 'trace' (finalize flags the steps it overlaps as
    traced; the phase breakdown leaves it out). A killed process's window ends at its last record."""

    import pyarrow as pa
    import pyarrow.compute as pc

    w = header.get("window")
    if not isinstance(w, list) or len(w) < 3 or w[0] is None:
        return None
    start = int(w[0]) + context.offset_ns
    if w[1] is not None:
        end = int(w[1]) + context.offset_ns
    else:
        ends = [int(pc.max(t.column("end_ns")).as_py()) for t in tables.values() if t.num_rows]
        end = max([start, *ends])
    return pa.table(
        {
            "rank": pa.array([context.rank], pa.int32()),
            "pid": [pid],
            "tid": [int(w[2])],
            "start_ns": [start],
            "end_ns": [end],
            "name": [WINDOW_NAME],
            "kind": ["range"],
            "source": ["dlscope"],
            "domain": [TRACE_DOMAIN],
        }
    )


def _real_tracer(spool_dir: Path, pid: int, clock: Any) -> ActivityTracer:
    from .cupti_activity import ActivityTracer

    return ActivityTracer(spool_dir, pid, clock)
