"""The JAX and TensorFlow layers: framework ops, kernels and steps through the frameworks' own
profiler (``jax.profiler`` / ``tf.profiler.experimental``, the same TSL profiler in each).

When the program imports the framework, the collector starts its profiler writing into the
spool; at stop the profiler writes its XSpace (``*.xplane.pb``) there, and finalize reads it with
the XProf importer (:mod:`dlscope.importers.xprof`): HLO or TensorFlow ops with their kernels
(XLA annotates every kernel with its HLO op, so each kernel has its op), the program's
``StepTraceAnnotation``/``Trace(step_num=)`` steps and ``TraceAnnotation`` phases. The
framework's profiler drives CUPTI itself, so dlscope's own CUPTI collector stays off for it.

The two frameworks' collectors are :mod:`.jax_layer` and :mod:`.tf_layer` (JAX's starts later
than its import: see there).

Python-function tracing is off (it costs more than everything else together). Steps: the
program's step annotations (``StepTraceAnnotation``, ``Trace(step_num=)``) are followed (their
``__enter__``/``__exit__`` wrapped), so every step is timed on dlscope's clock, traced or not;
tracing stops when the step after the warm-up and the detail steps is about to start, as in the
PyTorch layer (``--detail-steps``, ``--mode full``). Without step annotations the whole run is
traced, and a JAX program's steps are the runs of its repeated jit executable, found in the trace
(:mod:`dlscope.importers.jit_steps`). Steps the program marks with ``dlscope.step()`` win over both.

Clocks: the XSpace stamps events with the Unix-epoch clock. At start an annotation is bracketed
by two reads of the session's clock; at decode every event is shifted by the smallest amount
that puts it inside the bracket.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import CollectorUnavailable
from .base import Collector, DecodeContext, Settings
from .import_hooks import cancel, when_imported
from .schedule import Action
from .torch import TRACE_DOMAIN, detail_last_step

if TYPE_CHECKING:
    import pyarrow as pa

    from .session import Session

CLOCK_MARKER = "dlscope-clock-sync"


class XprofCollector(Collector):
    """Base of the two: ``framework`` is the module whose import starts it."""

    framework: ClassVar[str] = ""
    scope = "process"
    layers = ("framework", "runtime", "hardware")

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.session: Session | None = None
        self.module: ModuleType | None = None
        self.tracing = False
        self.done = False
        self.reason = ""
        self.marker: tuple[int, int] | None = None
        self.window: list[int] = []
        self.last_step: int | None = None
        self.steps: list[list[int]] = []  # [step_num, start, end] of each step annotation, session clock
        self._patched: list[tuple[Any, str, Any]] = []
        self._lock = threading.Lock()

    @property
    def logdir(self) -> Path:
        assert self.session is not None
        return self.session.spool_dir / f"{self.session.pid}.{self.name}"

    def start(self, session: Session) -> None:
        self.session = session
        self.last_step = detail_last_step(self.settings, session.schedule)
        when_imported(self.framework, self._on_import)

    def _on_import(self, module: ModuleType) -> None:
        if self.session is None or self.session.stopped:
            return
        self.module = module
        try:
            self._watch_steps()
        except Exception as e:  # an unexpected framework version: steps then come from the trace alone
            self.reason = f"step annotations not followed ({e.__class__.__name__}: {e})"
        self._arm()

    # ---- the program's step annotations ------------------------------------------------------
    def _step_class(self) -> Any:
        """The framework's step annotation class (its instances take ``step_num=``)."""
        raise NotImplementedError

    def _watch_steps(self) -> None:
        """Wrap the step annotation's __init__/__enter__/__exit__: each step's times go to
        :attr:`steps` (so every step is timed, traced or not), and the trace stops when the step
        after the detail window is about to start (between steps, so no step pays for it)."""
        cls = self._step_class()
        init, enter, leave = cls.__init__, cls.__enter__, cls.__exit__
        collector = self

        def __init__(self: Any, name: str, **kwargs: Any) -> None:
            init(self, name, **kwargs)
            try:
                self._dlscope_step = kwargs.get("step_num")
            except AttributeError:
                pass

        def __enter__(self: Any) -> Any:
            step = getattr(self, "_dlscope_step", None)
            if step is not None:
                collector._step_starts(self)
            return enter(self)

        def __exit__(self: Any, *exc: Any) -> Any:
            out = leave(self, *exc)
            start = getattr(self, "_dlscope_t0", None)
            if start is not None and collector.session is not None:
                collector.steps.append([int(self._dlscope_step), start, collector.session.clock()])
            return out

        for attr, fn in (("__init__", __init__), ("__enter__", __enter__), ("__exit__", __exit__)):
            self._patched.append((cls, attr, cls.__dict__.get(attr)))
            setattr(cls, attr, fn)

    def _step_starts(self, annotation: Any) -> None:
        if self.session is None:
            return
        if self.tracing and self.last_step is not None and len(self.steps) > self.last_step:
            self._end()  # the detail window is over
        try:
            annotation._dlscope_t0 = self.session.clock()
        except AttributeError:
            pass

    def _unwatch_steps(self) -> None:
        for cls, attr, original in reversed(self._patched):
            if original is None:
                delattr(cls, attr)  # it was inherited
            else:
                setattr(cls, attr, original)
        self._patched = []

    def _arm(self) -> None:
        """Start tracing now (subclasses may wait for the framework to be ready)."""
        self._begin()

    def _begin(self) -> None:
        with self._lock:
            if self.tracing or self.done or self.session is None or self.session.stopped:
                return
            if not self.session.claim_cupti(self.name):
                self.reason = (
                    f"CUPTI is used by {self.session.cupti_owner}: GPU activity of {self.framework} not recorded"
                )
            clock = self.session.clock
            start = clock()
            try:
                self._start_profiler(str(self.logdir))
            except Exception as e:  # the program must run on whatever happens here
                self.reason = f"{self.framework} profiler did not start: {e.__class__.__name__}: {str(e)[:200]}"
                self.done = True
                self.session.release_cupti(self.name)
                return
            a = clock()
            self._annotate(CLOCK_MARKER)
            self.marker = (a, clock())
            self.window = [start, 0, threading.get_native_id()]
            self.tracing = True

    def _end(self) -> None:
        with self._lock:
            if not self.tracing or self.session is None:
                return
            self.tracing = False
            self.done = True
            self.window[1] = self.session.clock()
            try:
                self._stop_profiler()
            except Exception as e:
                self.reason = (
                    f"{self.framework} profiler did not write its trace: {e.__class__.__name__}: {str(e)[:200]}"
                )
            finally:
                self.session.release_cupti(self.name)

    def on_step(self, step: int, action: Action) -> None:
        if self.tracing and (action is Action.SKIP or (self.last_step is not None and step > self.last_step)):
            self._end()

    def stop(self) -> None:
        cancel(self.framework, self._on_import)
        self._unarm()
        self._unwatch_steps()
        self._end()
        if self.session is not None and self.window:
            header = {
                "marker": list(self.marker) if self.marker else None,
                "window": self.window,
                "app_steps": self.session.recorder.step_count,
                "framework": self.framework,
                "steps": self.steps,
                "tid": threading.get_native_id(),
            }
            (self.session.spool_dir / f"{self.session.pid}.{self.name}.json").write_text(json.dumps(header))
        if self.module is None:
            raise CollectorUnavailable(f"the program never imported {self.framework}")
        if not self.window:
            raise CollectorUnavailable(self.reason or f"{self.framework} never initialized its backends")

    def _unarm(self) -> None:
        """Undo what _arm set up."""

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"framework": self.framework, "version": getattr(self.module, "__version__", None)}
        if self.reason:
            out["note"] = self.reason
        return out

    # ---- the framework's profiler ------------------------------------------------------------
    def _start_profiler(self, logdir: str) -> None:
        raise NotImplementedError

    def _stop_profiler(self) -> None:
        raise NotImplementedError

    def _annotate(self, name: str) -> None:
        raise NotImplementedError

    # ---- finalize ------------------------------------------------------------------------------
    @classmethod
    def decode(cls, spool_dir: Path, pid: int, context: DecodeContext) -> dict[str, pa.Table]:
        import pyarrow as pa

        from ..importers.xprof import find_xspaces, read_xspace

        try:
            header = json.loads((spool_dir / f"{pid}.{cls.name}.json").read_text())
        except (OSError, ValueError):
            return {}
        files = find_xspaces(spool_dir / f"{pid}.{cls.name}") if (spool_dir / f"{pid}.{cls.name}").is_dir() else []
        if not files:
            context.notes.append(f"process {pid}: the {header.get('framework')} profiler wrote no trace")
            return {}
        out: dict[str, list[pa.Table]] = {}
        for path in files:
            res = read_xspace(path.read_bytes(), rank=context.rank, pid=pid, marker=CLOCK_MARKER)
            shift = _shift_ns(header.get("marker"), res.marker_ns, context.offset_ns)
            w = header.get("window") or []
            # the profiler names threads its own way: the one that made the marker is the OS thread
            # that started tracing (the program's main thread, as a rule)
            tids = {res.marker_line: int(w[2])} if res.marker_line is not None and len(w) == 3 else {}
            for name, table in res.tables.items():
                table = _retid(table, tids)
                if name == "steps":
                    if header.get("app_steps") or header.get("steps"):
                        continue  # the program's own dlscope steps win; else the timed annotations below
                    table = _warmup(table, int((context.session.get("schedule") or {}).get("warmup") or 0))
                    if res.steps_note:
                        context.notes.append(f"process {pid}: {res.steps_note}")
                out.setdefault(name, []).append(_shifted(table, shift))
            for d in res.devices:
                if d not in context.devices:
                    context.devices.append(d)
            context.frameworks.update(res.frameworks)
        if header.get("steps") and not header.get("app_steps"):
            out["steps"] = [
                _warmup(
                    _timed_steps(header, context, pid), int((context.session.get("schedule") or {}).get("warmup") or 0)
                )
            ]
        w = header.get("window") or []
        if len(w) == 3:
            end = w[1] or w[0]
            out.setdefault("phases", []).append(
                pa.table(
                    {
                        "rank": pa.array([context.rank], pa.int32()),
                        "pid": [pid],
                        "tid": [int(w[2])],
                        "start_ns": [int(w[0]) + context.offset_ns],
                        "end_ns": [int(end) + context.offset_ns],
                        "name": [f"{header.get('framework')} profiler tracing"],
                        "kind": ["range"],
                        "source": ["dlscope"],
                        "domain": [TRACE_DOMAIN],
                    }
                )
            )
        return {k: pa.concat_tables(v, promote_options="permissive") for k, v in out.items()}


def _retid(t: pa.Table, tids: dict[int, int]) -> pa.Table:
    import pyarrow as pa

    if not tids or "tid" not in t.column_names:
        return t
    col = [tids.get(x, x) if x is not None else None for x in t.column("tid").to_pylist()]
    return t.set_column(t.schema.get_field_index("tid"), "tid", pa.array(col, pa.int64()))


def _timed_steps(header: dict[str, Any], context: DecodeContext, pid: int) -> pa.Table:
    """Every step annotation the program made, timed on the session clock (one row per step
    number: the first, when a number repeats)."""
    import pyarrow as pa

    w = header.get("window") or []
    tid = int(w[2]) if len(w) == 3 else int(header.get("tid") or 0)
    seen: dict[int, list[int]] = {}
    for step, start, end in header["steps"]:
        seen.setdefault(int(step), [int(start), int(end)])
    n = len(seen)
    return pa.table(
        {
            "rank": pa.array([context.rank] * n, pa.int32()),
            "step": pa.array(list(seen), pa.int32()),
            "start_ns": pa.array([v[0] + context.offset_ns for v in seen.values()], pa.int64()),
            "end_ns": pa.array([v[1] + context.offset_ns for v in seen.values()], pa.int64()),
            "pid": pa.array([pid] * n, pa.int64()),
            "tid": pa.array([tid] * n, pa.int64()),
            "source": ["profiler_step"] * n,
            "warmup": pa.array([False] * n, pa.bool_()),
            "traced": pa.array([True] * n, pa.bool_()),
        }
    )


def _warmup(steps: pa.Table, n: int) -> pa.Table:
    """The first ``n`` steps (by number) flagged as warm-up, as the session's schedule says."""
    import pyarrow as pa

    order = sorted(steps.column("step").to_pylist())
    first = set(order[:n])
    flags = pa.array([s in first for s in steps.column("step").to_pylist()], pa.bool_())
    return steps.set_column(steps.schema.get_field_index("warmup"), "warmup", flags)


def _shift_ns(marker: list[int] | None, seen: tuple[int, int] | None, offset_ns: int) -> int:
    """ns to add to trace times so the marker lies inside the session-clock bracket."""
    if not marker or seen is None:
        return 0
    a, b = (int(x) + offset_ns for x in marker)
    s, e = seen
    if s < a:
        return a - s
    if e > b:
        return b - e
    return 0


def _shifted(t: pa.Table, ns: int) -> pa.Table:
    import pyarrow as pa
    import pyarrow.compute as pc

    if not ns:
        return t
    for c in ("start_ns", "end_ns"):
        if c in t.column_names:
            t = t.set_column(t.schema.get_field_index(c), c, pc.add(t.column(c), pa.scalar(ns, pa.int64())))
    return t
