"""Import JAX and TensorFlow profiler traces (XProf's ``*.xplane.pb``) into the profile's tables.

``jax.profiler.trace(dir)`` / ``start_trace`` and ``tf.profiler.experimental.start(dir)`` write
``dir/plugins/profile/<run>/<host>.xplane.pb`` (JAX may add a ``.trace.json.gz`` of the same
events; the XSpace is read because both frameworks always write it, and it carries the absolute
start time). What becomes what:

* **steps**: host events with a ``step_num`` stat: ``jax.profiler.StepTraceAnnotation(name,
  step_num=i)`` and ``tf.profiler.experimental.Trace(name, step_num=i, _r=1)``; without them, a
  TF1 program's ``Session.run`` calls (the seed design's iteration: one RunMetadata per run), or
  the runs of a JAX program's repeated jit executable (its training step: :mod:`.jit_steps`).
* **phases**: the other annotations on the threads that hold steps (the program's own
  ``TraceAnnotation``/``Trace`` ranges), leaving out the frameworks' internal events
  (:data:`INTERNAL`), Python-tracer frames (``$file:line fn``) and events that are ops.
* **ops**: XLA's HLO ops (events with an ``hlo_op`` stat, category ``hlo_op``), each run of a
  compiled module (``hlo_module``, category ``xla_module``, enclosing its ops), JAX's jitted
  function calls (``PjitFunction(f)``, category ``jax_function``), TensorFlow's graph ops (names
  ``scope/name:Type``, category ``tf_op``), its eager ops (``tf_eager_op``), tf.function
  calls (``tf_function``) and TF1 ``Session.run`` calls (``tf_session_run``).
* **kernels, memcpy, memset**: the GPU planes' stream lines (``Stream #N(...)``). On the GPU an
  op is the run of consecutive kernels of one stream annotated with the same ``hlo_op`` (or
  ``tf_op``) and module: the op rows get the kernels' device times on a track of their own, and
  the kernels link to them by ``external_id``, so every kernel XLA annotated has its op.

Times: event offsets are relative to the session start, which the ``Task Environment`` plane
records (``profile_start_time``, ns since the Unix epoch).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..store.build import ProfileBuilder
from ..store.meta import CollectorStatus, Meta
from ..store.schema import TABLES_BY_NAME
from .arrow_values import typed_array
from .base import Importer, ImportOptions
from .hlo_source import hlo_sources
from .jit_steps import CALL_CATEGORY, MODULE_CATEGORY, OpEvent, choose, executables, steps_table
from .xplane_pb import Event, Line, Plane, parse_xspace

if TYPE_CHECKING:  # loaded with the first XSpace read: registering importers must stay light
    import pyarrow as pa

# Runtime events of JAX/XLA/TensorFlow seen on the Python thread that are not the program's own
# annotations (names with '::' are C++ scopes and are left out too).
INTERNAL = re.compile(
    r"::|^PjitFunction\(|^Wait for |^Handle input|^ParseArguments$|^AllocateOutput|^DevicePut|^shard_args$"
    r"|^lower_|^backend_compile|^batched_copy|^BatchedCopy|^ExecuteReplicated|^PythonRefManager|^Eager"
    r"|^TFE_|^ValidateInputTypeAndPlacement$|^convert_to_tensor$|^tf\.constant$|^FunctionRun$|^end: "
    r"|^cu[A-Z]\w*$|^cuda[A-Z]\w*$|^Thunk|^Execute|^Compile|^Await|^trace_to_|jaxpr|^mlir|^cache_miss|^compile"
    r"|^np\.asarray|^ExecutorDoneCallback$"
)
_GPU_PLANE = re.compile(r"^/device:GPU:(\d+)")
_STREAM = re.compile(r"^Stream #(\d+)")
# lines XProf derives from the streams' events (what they say is read from the streams themselves)
DERIVED_LINES = frozenset(
    {
        "XLA Ops",
        "XLA Modules",
        "Async XLA Ops",
        "Steps",
        "Framework Ops",
        "Framework Name Scope",
        "TensorFlow Ops",
        "TensorFlow Name Scope",
        "Source code",
        "Launch Stats",
        "XLA TraceMe",
        "Host Threads",
        "SparseCore Ops",
        "CUPTI overhead",
    }
)
_KERNEL_DETAIL = re.compile(r"(regs|static_shared|dynamic_shared|grid|block):([\d,]+)")
_MEMCPY_KIND = {
    "htod": "HtoD",
    "dtoh": "DtoH",
    "dtod": "DtoD",
    "htoh": "HtoH",
    "ptop": "PtoP",
    "h2d": "HtoD",
    "d2h": "DtoH",
    "d2d": "DtoD",
    "p2p": "PtoP",
}
_MEM_KINDS = ("pageable", "pinned", "device", "managed", "array")
CUPTI_PLANE = "/host:CUPTI"  # XLA's CUPTI tracer puts the CUDA API calls it saw here
OP_TRACK_BASE = 1 << 40  # tid of the per-stream op track: never an OS thread id or a line id seen here


@dataclass
class Tables:
    """Rows per table (dicts; a key a row lacks is NULL)."""

    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, table: str, **values: Any) -> None:
        self.rows.setdefault(table, []).append(values)

    def count(self, table: str) -> int:
        return len(self.rows.get(table, ()))

    def arrow(self) -> dict[str, pa.Table]:
        import pyarrow as pa

        """Columns typed as the schema types them (text name columns stay text), so that the
        tables concatenate with other collectors' tables."""
        out = {}
        for name, rows in self.rows.items():
            if not rows:
                continue
            types = {c.name: c.type for c in TABLES_BY_NAME[name].columns}
            keys = list(dict.fromkeys(k for r in rows[:1] for k in r))
            keys += [k for k in dict.fromkeys(k for r in rows for k in r) if k not in keys]
            out[name] = pa.table({k: typed_array([r.get(k) for r in rows], types.get(k)) for k in keys})
        return out


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def start_time_ns(planes: list[Plane]) -> int | None:
    for p in planes:
        if p.name == "Task Environment":
            return _int(p.stats.get("profile_start_time"))
    return None


@dataclass
class XSpaceResult:
    tables: dict[str, pa.Table]
    frameworks: dict[str, str]
    devices: list[dict[str, Any]]
    notes: list[str]
    counts: dict[str, int]
    marker_ns: tuple[int, int] | None = None  # the clock-sync annotation, when asked for
    marker_line: int | None = None  # the id of the host line (thread) it was on
    # where the steps were derived from the runs of a jit executable (no step annotations): which, and why
    steps_note: str | None = None


def read_xspace(
    data: bytes,
    *,
    rank: int = 0,
    pid: int | None = None,
    base_ns: int | None = None,
    op_base: int = 0,
    marker: str | None = None,
) -> XSpaceResult:
    """One XSpace to tables (text name columns). ``base_ns``: epoch ns of the session start
    (default: the trace's own ``profile_start_time``); ``pid`` overrides the trace's; the host
    event named ``marker`` (a clock-sync annotation) is left out and its times returned."""
    try:
        planes, hosts = parse_xspace(data)
    except ValueError as e:
        raise InputError(f"corrupt XSpace ({e})") from None
    if not planes:
        raise InputError("an empty XSpace (no planes)")
    notes: list[str] = []
    if base_ns is None:
        base_ns = start_time_ns(planes)
        if base_ns is None:
            base_ns = 0
            notes.append("no profile_start_time in the trace: times are relative to its start")
    frameworks: dict[str, str] = {}
    for p in planes:
        if p.name == "/host:metadata":
            for k in ("jax_version", "jaxlib_version"):
                if p.stats.get(k):
                    frameworks[k.replace("_version", "")] = str(p.stats[k])
            if pid is None:
                pid = _int(p.stats.get("process_id"))
    sources: dict[str, dict[str, str]] = {}  # module -> instruction -> op path and source line
    for p in planes:
        for blob in p.blobs.values():
            try:
                module, by_op = hlo_sources(blob)
            except ValueError:
                notes.append("an unreadable HLO module in the trace's metadata: its ops have no source lines")
                continue
            sources[module] = by_op
    host = next((p for p in planes if p.name == "/host:CPU"), None)
    if pid is None and host is not None:
        pid = _int(host.stats.get("process_id"))
    pid = pid or 0
    out = Tables()
    ids = itertools.count(op_base)
    marker_ns = None
    if host is not None:
        marker_ns = _host(host, out, rank, pid, base_ns, ids, sources, marker)
    for p in planes:
        if p.name == CUPTI_PLANE:
            _cupti_api(p, out, rank, pid, base_ns)
    devices = []
    for p in planes:
        m = _GPU_PLANE.match(p.name)
        if m:
            dev = int(m.group(1))
            devices.append(
                {
                    "rank": rank,
                    "index": dev,
                    "name": p.stats.get("device_name") or p.stats.get("name"),
                    "sms": _int(p.stats.get("core_count")),
                    "memory_bytes": _int(p.stats.get("memory_size")),
                    "compute_capability": _cc(p.stats),
                }
            )
            _device(p, dev, out, rank, pid, base_ns, ids, sources)
    tables = out.arrow()
    steps_note = None
    if not out.count("steps"):
        choice = choose(executables(_op_events(out.rows.get("ops", []))))
        if choice is not None:
            tables["steps"] = steps_table(choice, rank, pid)
            steps_note = choice.note()
    counts = {t: out.count(t) for t in ("ops", "phases", "api", "kernels", "memcpy", "memset")}
    counts["steps"] = tables["steps"].num_rows if "steps" in tables else 0
    if hosts:
        notes.append(f"host {hosts[0]}")
    return XSpaceResult(
        tables,
        frameworks,
        devices,
        notes,
        counts,
        marker_ns and marker_ns[:2],
        marker_ns[2] if marker_ns else None,
        steps_note,
    )


def _op_events(rows: list[dict[str, Any]]) -> list[OpEvent]:
    """The op rows a jit executable's runs are read from (host calls and module runs)."""
    keep = (CALL_CATEGORY, MODULE_CATEGORY)
    return [
        OpEvent(r["category"], r["name"], r["start_ns"], r["end_ns"], r["tid"]) for r in rows if r["category"] in keep
    ]


def _cc(stats: dict[str, Any]) -> str | None:
    major, minor = _int(stats.get("compute_cap_major")), _int(stats.get("compute_cap_minor"))
    return f"{major}.{minor}" if major is not None else None


def _source(sources: dict[str, dict[str, str]], module: Any, op: Any, stats: dict[str, Any]) -> str | None:
    # (a GPU kernel's tf_op stat is the outermost annotation's name: for XLA the op itself, no source)
    return sources.get(str(module), {}).get(str(op)) if module and op else None


def _host(
    plane: Plane,
    out: Tables,
    rank: int,
    pid: int,
    base: int,
    ids: Iterable[int],
    sources: dict[str, dict[str, str]],
    marker: str | None = None,
) -> tuple[int, int, int] | None:
    """Host events to steps, phases and ops; returns the marker's (start, end, line id) if seen."""
    it = iter(ids)
    marker_ns = None
    step_lines = {line.id for line in plane.lines for e in line.events if "step_num" in e.stats}
    seen_steps: set[int] = set()
    # one row per module run, on the thread of its first op (XLA:CPU spreads a run's ops over its
    # threads): (run_id, module) -> [start, end, tid]; a run without run_id is a streak of its ops
    modules: dict[tuple[Any, ...], list[int]] = {}
    ops: list[dict[str, Any]] = []
    for line in plane.lines:
        annotations = line.id in step_lines or (not step_lines and line.name in ("python", "MainThread"))
        jit_end: dict[str, int] = {}  # PjitFunction(f) nests a second PjitFunction(f): count the outer one
        streak: tuple[Any, int] = (None, 0)
        for e in line.events:
            s, t = base + e.start_ns, base + e.start_ns + e.dur_ns
            if marker is not None and e.name == marker:
                marker_ns = (s, t, line.id)
                continue
            common = {"rank": rank, "pid": pid, "tid": line.id, "start_ns": s, "end_ns": t}
            step = _int(e.stats.get("step_num"))
            if step is not None:
                if step not in seen_steps:  # one row per step (nested re-annotations ignored)
                    seen_steps.add(step)
                    out.add(
                        "steps",
                        rank=rank,
                        step=step,
                        start_ns=s,
                        end_ns=t,
                        pid=pid,
                        tid=line.id,
                        source="profiler_step",
                        warmup=False,
                        traced=True,
                    )
                continue
            kind = op_kind(e)
            if kind is not None:
                category, name = kind
                module = e.stats.get("hlo_module")
                if category == "jax_function":
                    if e.start_ns < jit_end.get(name, -1):
                        continue
                    jit_end[name] = e.start_ns + e.dur_ns
                ops.append(
                    dict(
                        **common,
                        name=name,
                        category=category,
                        op_id=next(it),
                        source=_source(sources, module, e.stats.get("hlo_op"), e.stats),
                    )
                )
                if category == "hlo_op" and module:
                    run = e.stats.get("run_id")
                    if run is None:
                        if streak[0] != module:
                            streak = (module, streak[1] + 1)
                        key: tuple[Any, ...] = (module, line.id, streak[1])
                    else:
                        key = (module, run)
                    span = modules.setdefault(key, [s, t, line.id])
                    span[0], span[1] = min(span[0], s), max(span[1], t)
                continue
            if (
                annotations
                and not e.name.startswith("$")
                and not INTERNAL.search(e.name)
                and "_src" not in e.stats
                and e.dur_ns > 0
            ):
                out.add("phases", **common, name=e.name, kind="range", source="record_function", domain="xprof")
    # modules first: a module with one op has that op's span, and the first of two equal intervals
    # becomes the parent
    if not seen_steps:  # a TF1 program: each Session.run is an iteration, as in TensorFlow's own RunMetadata
        runs = sorted((o["start_ns"], o["end_ns"], o["tid"]) for o in ops if o["category"] == "tf_session_run")
        for i, (s, t, tid) in enumerate(runs):
            out.add(
                "steps",
                rank=rank,
                step=i,
                start_ns=s,
                end_ns=t,
                pid=pid,
                tid=tid,
                source="session_run",
                warmup=False,
                traced=True,
            )
    for key, (s, t, tid) in modules.items():
        out.add(
            "ops",
            rank=rank,
            pid=pid,
            tid=tid,
            start_ns=s,
            end_ns=t,
            name=str(key[0]),
            category="xla_module",
            op_id=next(it),
        )
    for row in ops:
        out.add("ops", **row)
    return marker_ns


def _cupti_api(plane: Plane, out: Tables, rank: int, pid: int, base: int) -> None:
    """The CUDA driver/runtime calls XLA's CUPTI tracer recorded, one line per host thread: the
    launches that kernels name by correlation id."""
    for line in plane.lines:
        for e in line.events:
            corr = _int(e.stats.get("correlation_id"))
            s = base + e.start_ns
            out.add(
                "api",
                rank=rank,
                pid=pid,
                tid=_int(e.stats.get("thread_id")) or line.id,
                start_ns=s,
                end_ns=s + e.dur_ns,
                name=e.display or e.name,
                correlation_id=corr,
                kind="runtime" if e.name.startswith("cuda") else "driver",
            )


def op_kind(e: Event) -> tuple[str, str] | None:
    """(category, name) when the host event is a framework op, else None."""
    st = e.stats
    if st.get("hlo_op"):
        return "hlo_op", str(st["hlo_op"])
    if e.name.startswith("PjitFunction(") and e.name.endswith(")"):
        return "jax_function", f"jit({e.name[len('PjitFunction(') : -1]})"
    if "tf_function_call" in st:
        return "tf_function", e.name
    if e.name == "SessionRun":  # a TF1 tf.compat.v1.Session.run call
        return "tf_session_run", e.name
    if e.name == "EagerExecute" and st.get("eager_op") and str(st.get("is_func", "0")) == "0":
        return "tf_eager_op", str(st["eager_op"])
    if ":" in e.name and not e.name.startswith("$") and re.fullmatch(r"[\w./-]+:\w+", e.name):
        return "tf_op", e.name  # a graph node: scope/name:Type
    return None


def stream_of(line: Line) -> int | None:
    """The CUDA stream a GPU plane's line records, or None for the lines XProf derives from them.
    Stream lines are named 'Stream #N(...)'; a line under another name whose events carry CUPTI's
    correlation ids is taken as a stream too (numbered by its line id)."""
    m = _STREAM.match(line.name)
    if m:
        return int(m.group(1))
    if line.name in DERIVED_LINES:
        return None
    if any("correlation_id" in e.stats for e in line.events[:50]):
        return line.id
    return None


def _device(
    plane: Plane,
    dev: int,
    out: Tables,
    rank: int,
    pid: int,
    base: int,
    ids: Iterable[int],
    sources: dict[str, dict[str, str]],
) -> None:
    it = iter(ids)
    for line in plane.lines:
        stream = stream_of(line)
        if stream is None:
            continue  # derived lines (XLA Ops, Steps ...) repeat what the streams say
        track = OP_TRACK_BASE + dev * 1_000_000 + stream
        op: dict[str, Any] | None = None
        module: dict[str, Any] | None = None

        op_rows: list[dict[str, Any]] = []  # written after the modules (see _host)

        def close(
            span: dict[str, Any] | None, category: str, track: int = track, op_rows: list[dict[str, Any]] = op_rows
        ) -> None:
            if span is not None:
                row = dict(
                    rank=rank,
                    pid=pid,
                    tid=track,
                    start_ns=span["s"],
                    end_ns=span["t"],
                    name=span["name"],
                    category=category,
                    op_id=span["id"],
                    external_id=span["id"],
                    source=span.get("source"),
                )
                if category == "xla_module":
                    out.add("ops", **row)
                else:
                    op_rows.append(row)

        for e in line.events:
            s, t = base + e.start_ns, base + e.start_ns + e.dur_ns
            st = e.stats
            corr = _int(st.get("correlation_id"))
            gpu = {
                "rank": rank,
                "device": dev,
                "stream": stream,
                "start_ns": s,
                "end_ns": t,
                "correlation_id": corr,
                "pid": pid,
            }
            key = st.get("hlo_op") or st.get("tf_op") or st.get("long_name")
            mod = st.get("hlo_module")
            ext = None
            if key:
                if op is None or op["name"] != key or op["module"] != mod:
                    close(op, "tf_op" if not st.get("hlo_op") else "hlo_op")
                    op = {
                        "name": str(key),
                        "module": mod,
                        "s": s,
                        "t": t,
                        "id": next(it),
                        "source": _source(sources, mod, st.get("hlo_op"), st),
                    }
                op["t"] = max(op["t"], t)
                ext = op["id"]
                if mod:
                    if module is None or module["name"] != mod:
                        close(module, "xla_module")
                        module = {"name": str(mod), "s": s, "t": t, "id": next(it)}
                    module["t"] = max(module["t"], t)
            if "memcpy_details" in st or e.name.lower().startswith("memcpy"):
                kind, src, dst, size = _memcpy(str(st.get("memcpy_details", "")), e.name)
                out.add("memcpy", **gpu, external_id=ext, bytes=size, copy_kind=kind, src_kind=src, dst_kind=dst)
            elif "memset_details" in st or e.name.lower().startswith("memset"):
                _, src, _, size = _memcpy(str(st.get("memset_details", "")), e.name)
                out.add("memset", **gpu, external_id=ext, bytes=size, mem_kind=src)
            else:
                out.add("kernels", **gpu, external_id=ext, name=e.name, **_kernel(str(st.get("kernel_details", ""))))
        close(op, "hlo_op" if op and op["module"] else "tf_op")
        close(module, "xla_module")
        for row in op_rows:
            out.add("ops", **row)


def _kernel(details: str) -> dict[str, Any]:
    d = dict(_KERNEL_DETAIL.findall(details))
    out: dict[str, Any] = {"registers": _int(d.get("regs"))}
    st, dy = _int(d.get("static_shared")), _int(d.get("dynamic_shared"))
    out.update(
        static_shared_bytes=st,
        dynamic_shared_bytes=dy,
        shared_bytes=(st or 0) + (dy or 0) if st is not None or dy is not None else None,
    )
    for key in ("grid", "block"):
        dims = [_int(x) for x in d.get(key, "").split(",") if x] + [None, None, None]
        out.update({f"{key}_x": dims[0], f"{key}_y": dims[1], f"{key}_z": dims[2]})
    return out


def _memcpy(details: str, name: str) -> tuple[str, str, str, int]:
    kv: dict[str, str] = dict(re.findall(r"(\w+):(\S+)", details))
    size = _int(kv.get("size")) or _int(kv.get("num_bytes")) or 0
    src = kv.get("kind_src", kv.get("kind", "unknown")).lower()  # a memset says kind:
    dst = kv.get("kind_dst", "unknown").lower()
    src, dst = (src if src in _MEM_KINDS else "unknown"), (dst if dst in _MEM_KINDS else "unknown")
    m = re.search(r"(HtoD|DtoH|DtoD|HtoH|PtoP|H2D|D2H|D2D|P2P)", name + " " + kv.get("kind", ""), re.IGNORECASE)
    kind = _MEMCPY_KIND.get(m.group(1).lower(), "unknown") if m else "unknown"
    return kind, src, dst, size


def _sibling_xspace(path: Path) -> Path | None:
    """The XSpace of the same host beside a JAX ``<host>.trace.json.gz``."""
    if not path.name.endswith(".trace.json.gz"):
        return None
    sibling = path.with_name(path.name[: -len(".trace.json.gz")] + ".xplane.pb")
    return sibling if sibling.is_file() else None


def find_xspaces(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.xplane.pb") if p.is_file())


class XprofImporter(Importer):
    name = "xprof"
    description = (
        "JAX and TensorFlow profiler traces (jax.profiler / tf.profiler.experimental: a log folder or its *.xplane.pb)"
    )

    def sniff(self, path: Path, head: bytes) -> bool:
        if path.name.endswith(".xplane.pb"):
            return head[:1] == b"\x0a"
        # the JSON JAX writes beside its XSpace: the XSpace holds the same events and more
        return path.name.endswith(".trace.json.gz") and bool(_sibling_xspace(path))

    def expand_dir(self, directory: Path) -> list[Path]:
        return find_xspaces(directory)

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        op_base = 0
        for path in dict.fromkeys(_sibling_xspace(f) or f for f in files):
            try:
                data = path.read_bytes()
            except OSError as e:
                raise InputError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from None
            try:
                res = read_xspace(data, rank=options.rank or 0, op_base=op_base)
            except InputError as e:
                raise InputError(f"{path}: {e}") from None
            for name, table in res.tables.items():
                builder.add(name, table)
            op_base += res.counts["ops"] + 1
            meta.ranks.append(options.rank or 0)
            for d in res.devices:
                meta.add_device(d)
            meta.frameworks.update(res.frameworks)
            meta.collectors.setdefault("xprof", CollectorStatus("ok", "", {"file": path.name}))
            for n in res.notes:
                meta.note(f"{path.name}: {n}")
            if res.steps_note:
                meta.note(f"{path.name}: {res.steps_note}")
            elif not res.counts["steps"]:
                meta.note(
                    f"{path.name}: no step annotations (jax.profiler.StepTraceAnnotation or "
                    "tf.profiler.experimental.Trace with step_num)"
                )
            if not (res.counts["kernels"] or res.counts["memcpy"]):
                meta.note(f"{path.name}: no GPU activity (a CPU-only run)")
