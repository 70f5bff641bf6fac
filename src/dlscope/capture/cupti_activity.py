"""Live CUPTI activity tracing (kernels, memcpy, memset, runtime and driver API calls,
synchronization) through cupti-python, with records handled in bulk.

cupti-python's buffer-completed callback hands Python one object per record (about 17k records/s
measured on an H100: far too slow for a CUDA program's launch rate). So the two buffer callbacks
are registered with CUPTI directly (ctypes, on the very libcupti cupti-python loaded): the
request callback hands CUPTI a buffer from a small pool, the completed callback queues the
buffer untouched, and a worker thread walks it once (one integer read per record), gathers each
kind's records into a contiguous block with numpy and appends the blocks to the spool. Kernel
names (pointers into CUPTI's memory) and API names are resolved once per distinct value.
Everything else (enabling kinds, flushing, timestamps, dropped counts, enum and struct layouts)
is cupti-python.

The record sizes are not assumed: the first record of each kind is measured with
``cuptiActivityGetNextRecord``, and the field offsets are taken from cupti-python's dtype of
that size (or the largest older version that fits, since newer CUPTI structs only append
fields). Buffers are bounded: past ``MAX_HELD_BYTES`` CUPTI gets no buffer and counts the
records it drops; drops go to meta.json.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import CollectorUnavailable
from ..store.spool import write_json_atomic
from . import cupti_lib
from . import cupti_records as cr

BUFFER_BYTES = 8 * 1024 * 1024
MAX_HELD_BYTES = 256 * 1024 * 1024
PREALLOCATED = 2
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: also hand over buffers still being filled

KINDS = ("CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER", "SYNCHRONIZATION")
REQUIRED_KINDS = ("CONCURRENT_KERNEL", "RUNTIME")  # without these the layer is not worth having
_DTYPE_PREFIX = {
    "CONCURRENT_KERNEL": "activity_kernel",
    "MEMCPY": "activity_memcpy",
    "MEMSET": "activity_memset",
    "RUNTIME": "activity_api",
    "DRIVER": "activity_api",
    "SYNCHRONIZATION": "activity_synchronization",
}

# API calls that only read state, which CUDA frameworks make around every launch (CuPy asks for
# the current device before each operation): not traced, so that a launch costs two records
# (its API call and its kernel), not four or five. Names without the CUPTI version suffix.
TRIVIAL_API = frozenset(
    {
        "cudaGetDevice",
        "cudaGetDeviceCount",
        "cudaGetLastError",
        "cudaPeekAtLastError",
        "cudaDriverGetVersion",
        "cudaRuntimeGetVersion",
        "cudaStreamIsCapturing",
        "cudaStreamIsCapturing_ptsz",
        "cudaStreamGetCaptureInfo",
        "cudaStreamGetCaptureInfo_ptsz",
        "cudaStreamGetCaptureInfo_v2",
        "cudaStreamGetCaptureInfo_v2_ptsz",
        "cudaStreamGetCaptureInfo_v3",
        "cudaStreamGetCaptureInfo_v3_ptsz",
        "cudaStreamGetDevice",
        "cudaStreamGetDevice_ptsz",
        "cuCtxGetCurrent",
        "cuCtxGetDevice",
        "cuCtxGetDevice_v2",
        "cuCtxSetCurrent",
        "cuDeviceGetAttribute",
        "cuDriverGetVersion",
        "cuStreamIsCapturing",
        "cuStreamIsCapturing_ptsz",
        "cuStreamGetCaptureInfo",
        "cuStreamGetCaptureInfo_ptsz",
        "cuStreamGetCaptureInfo_v2",
        "cuStreamGetCaptureInfo_v2_ptsz",
        "cuStreamGetCaptureInfo_v3",
        "cuStreamGetCaptureInfo_v3_ptsz",
        "cuGetProcAddress",
        "cuGetProcAddress_v2",
        "cuPointerGetAttribute",
        "cuPointerGetAttributes",
    }
)

# Tools that attach to a CUDA program through the injection variable, and how to recognise them.
_INJECTORS = (
    ("ToolsInjection", "Nsight Systems (nsys)"),
    ("nsys", "Nsight Systems (nsys)"),
    ("InterceptorInjection", "Nsight Compute (ncu)"),
    ("nsight-compute", "Nsight Compute (ncu)"),
    ("sanitizer", "compute-sanitizer"),
)

_KEEPALIVE: list[Any] = []  # ctypes callbacks CUPTI may still call: never freed


def injected_tool(env: dict[str, str] | os._Environ[str]) -> str | None:
    """The CUDA tool injected into this process (it owns CUPTI), or None."""
    path = env.get("CUDA_INJECTION64_PATH") or env.get("CUDA_INJECTION32_PATH")
    if not path:
        return None
    tool = next((name for key, name in _INJECTORS if key.lower() in path.lower()), "a CUDA injection library")
    return f"{tool} is attached to this process (CUDA_INJECTION64_PATH={path}) and holds CUPTI"


def _cupti_reason(cupti: Any, e: BaseException) -> str:
    status = getattr(e, "status", None)
    if status is not None:
        try:
            name = cupti.Result(status).name
        except ValueError:
            name = str(status)
        if name == "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED":
            return "another CUPTI client (nsys, ncu, compute-sanitizer or a framework profiler) holds this process"
        return f"CUPTI error {name}"
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{e.__class__.__name__}: {first}"[:300]


class ActivityTracer:
    """One process's CUPTI activity recording into ``spool_dir``."""

    def __init__(self, spool_dir: Path, pid: int, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.spool_dir = spool_dir
        self.pid = pid
        self.clock = clock
        self.cupti: Any = None
        self.records: dict[str, int] = {}
        self.dropped = 0
        self.refused_buffers = 0
        self.errors: list[str] = []
        self.untraced: list[str] = []  # API calls left out on purpose (TRIVIAL_API)
        self._lib: Any = None
        self._kinds: dict[int, str] = {}
        self._sizes: dict[int, int] = {}
        self._layouts: dict[str, dict[str, Any]] = {}
        self._header: dict[str, Any] = {}
        self._pool: list[Any] = []
        self._out: dict[int, Any] = {}
        self._held = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._spool: Any = None
        self._names: Any = None
        self._kernel_names: set[int] = set()
        self._api_names: set[tuple[int, int]] = set()
        self._enabled: list[int] = []
        self.preloaded: str | None = None  # the libcupti dlscope loaded itself, if any

    # ---- start --------------------------------------------------------------------------------
    def start(self) -> None:
        """Begin tracing, or raise CollectorUnavailable(reason) having changed nothing."""
        reason = injected_tool(os.environ)
        if reason:
            raise CollectorUnavailable(reason)
        try:
            from cupti import cupti
        except Exception as e:  # ImportError is not always "not installed": see cupti_lib
            raise CollectorUnavailable(cupti_lib.import_failure(e)) from None
        self.cupti = cupti
        try:
            # cupti-python's loader misses wheels on PYTHONPATH (a --target install): load it first
            self.preloaded = cupti_lib.preload()
            self._probe_other_client()
            self._lib = _load_libcupti()
            cupti.set_thread_id_type(cupti.ActivityThreadIdType.SYSTEM)  # tids as the OS (and dlscope) sees them
            for _ in range(PREALLOCATED):
                self._pool.append(self._allocate())
            self._register_callbacks()
            for name in KINDS:
                k = int(getattr(cupti.ActivityKind, name))
                try:
                    cupti.activity_enable(k)
                except cupti.cuptiError as e:
                    if name in REQUIRED_KINDS:
                        raise
                    self.errors.append(f"{name} records not available: {_cupti_reason(cupti, e)}")
                    continue
                self._enabled.append(k)
                self._kinds[k] = name
        except CollectorUnavailable:
            self._disable()
            raise
        except Exception as e:  # cuptiError, NotSupportedError (no driver), OSError (no library)
            self._disable()
            raise CollectorUnavailable(_cupti_reason(cupti, e)) from None
        untraced = self.untraced = self._quiet_trivial_api()
        offset, unc = self._measure_offset()
        self._header = {
            "version": 1,
            "pid": self.pid,
            "kinds": {str(k): n for k, n in self._kinds.items()},
            "clock": {"cupti_to_mono_ns": offset, "uncertainty_ns": unc, "mono": "perf_counter_ns"},
            "enums": {
                "memcpy_kind": _members(cupti.ActivityMemcpyKind),
                "memory_kind": _members(cupti.ActivityMemoryKind),
                "sync_type": _members(cupti.ActivitySynchronizationType),
            },
            "layouts": self._layouts,
            "buffer_bytes": BUFFER_BYTES,
            "api_not_traced": untraced,
        }
        # the tracing window, on the monotonic clock: steps inside it are 'traced' (see finalize)
        self._header["window"] = [self.clock(), None, threading.get_native_id()]
        self._write_header()
        self._spool = open(self.spool_dir / f"{self.pid}.cupti.spool", "ab", buffering=0)  # noqa: SIM115
        if self._spool.tell() == 0:
            self._spool.write(cr.MAGIC)
        self._names = open(self.spool_dir / f"{self.pid}.cupti.names.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        self._worker = threading.Thread(target=self._work, name="dlscope-cupti", daemon=True)
        self._worker.start()

    def _quiet_trivial_api(self) -> list[str]:
        """Stop recording the state getters of TRIVIAL_API; returns the names left out."""
        cupti = self.cupti
        done: list[str] = []
        for enum_name, fn_name in (
            ("runtime_api_trace_cbid", "activity_enable_runtime_api"),
            ("driver_api_trace_cbid", "activity_enable_driver_api"),
        ):
            cbids, fn = getattr(cupti, enum_name, None), getattr(cupti, fn_name, None)
            if cbids is None or fn is None:
                continue  # an older cupti-python: everything is traced
            for member_name, member in cbids.__members__.items():  # aliases included
                name = cr.api_name(member_name)
                if name in TRIVIAL_API:
                    try:
                        fn(int(member.value), 0)
                        done.append(name)
                    except Exception:
                        pass
        return sorted(set(done))

    def _probe_other_client(self) -> None:
        """CUPTI allows one callback subscriber per process, and the tools (nsys, ncu, sanitizers,
        Kineto) subscribe: failing with MULTIPLE_SUBSCRIBERS means someone holds CUPTI. Any other
        failure is left for activity_enable to report. This call also makes cupti-python load
        libcupti, which _load_libcupti then finds."""
        cupti = self.cupti
        try:
            handle = cupti.subscribe(lambda *a: None, None)
        except cupti.cuptiError as e:
            if _cupti_reason(cupti, e).startswith("another CUPTI client"):
                raise
            return
        cupti.unsubscribe(handle)

    def _measure_offset(self) -> tuple[int, int]:
        """CUPTI timestamp -> monotonic clock, from the tightest of 16 bracketed reads."""
        best: tuple[int, int] | None = None
        for _ in range(16):
            a = self.clock()
            c = int(self.cupti.get_timestamp())
            b = self.clock()
            if best is None or b - a < best[0]:
                best = (b - a, (a + b) // 2 - c)
        assert best is not None
        return best[1], max(best[0] // 2, 1)

    # ---- the two buffer callbacks (called by CUPTI, any thread) --------------------------------
    def _allocate(self) -> Any:
        buf = ctypes.create_string_buffer(BUFFER_BYTES)
        if ctypes.addressof(buf) % 8:  # CUPTI needs 8-byte alignment; malloc gives 16
            raise CollectorUnavailable("could not allocate an aligned CUPTI buffer")
        self._held += BUFFER_BYTES
        return buf

    def _register_callbacks(self) -> None:
        req_t = ctypes.CFUNCTYPE(
            None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)
        )
        done_t = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
        )

        def requested(buf_p: Any, size_p: Any, max_records_p: Any) -> None:
            try:
                buf = self._pool.pop()  # a buffer the worker gave back (pop is atomic; the pool may race empty)
            except IndexError:
                try:
                    buf = self._allocate() if self._held + BUFFER_BYTES <= MAX_HELD_BYTES else None
                except Exception:
                    buf = None
            if buf is None:  # over the memory bound: CUPTI drops records and counts them
                self.refused_buffers += 1
                buf_p[0] = None
                size_p[0] = 0
                max_records_p[0] = 0
                return
            addr = ctypes.addressof(buf)
            self._out[addr] = buf
            buf_p[0] = addr
            size_p[0] = BUFFER_BYTES
            max_records_p[0] = 0

        def completed(ctx: Any, stream: int, buf_addr: Any, size: int, valid: int) -> None:
            try:
                buf = self._out.pop(buf_addr or 0, None)
                if buf is not None:
                    self._queue.put((buf, int(valid)))
                n = ctypes.c_size_t(0)
                self.cupti.activity_get_num_dropped_records(ctx or 0, stream, ctypes.addressof(n))
                self.dropped += int(n.value)
            except Exception as e:  # never raise into CUPTI
                self.errors.append(f"completed: {e!r}")

        req, done = req_t(requested), done_t(completed)
        _KEEPALIVE.append((req, done, self))
        fn = self._lib.cuptiActivityRegisterCallbacks
        fn.argtypes = [req_t, done_t]
        fn.restype = ctypes.c_int
        status = fn(req, done)
        if status != 0:
            raise self.cupti.cuptiError(status)

    # ---- the worker: walk, gather, spool ---------------------------------------------------------
    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            buf, valid = item
            try:
                self._process(buf, valid)
            except Exception as e:
                self.errors.append(f"buffer: {e.__class__.__name__}: {e}")
            finally:
                self._pool.append(buf)

    def _process(self, buf: Any, valid: int) -> None:
        import numpy as np

        found: dict[int, list[int]] = {}
        pos = 0
        while pos < valid:
            walked, pos = cr.walk(buf, valid, self._sizes, pos)
            for k, o in walked.items():
                found.setdefault(k, []).extend(o)
            if pos < valid and not self._learn(buf, valid, pos):
                self.errors.append(f"unknown record at byte {pos}; {valid - pos} bytes skipped")
                break
        names: list[str] = []
        out = bytearray()
        for k, offs in found.items():
            kname = self._kinds.get(k)
            if kname is None or kname not in self._layouts:
                continue
            size = self._sizes[k]
            data = cr.gather(buf, offs, size)
            self.records[kname] = self.records.get(kname, 0) + len(offs)
            fields = self._layouts[kname]["fields"]
            if kname == "CONCURRENT_KERNEL" and "name" in fields:
                for p in np.unique(cr.view(data, size, fields, ("name",))["name"]).tolist():
                    if p not in self._kernel_names:
                        self._kernel_names.add(p)
                        names.append(json.dumps(["k", p, _c_string(p)]))
            elif kname in ("RUNTIME", "DRIVER") and "cbid" in fields:
                for c in np.unique(cr.view(data, size, fields, ("cbid",))["cbid"]).tolist():
                    if (k, c) not in self._api_names:
                        self._api_names.add((k, c))
                        names.append(json.dumps(["a", k, c, self._api_name(kname, c)]))
            out += cr.block(k, size, data)
        if names:  # names first: a block never refers to a name that was not written
            self._names.write("\n".join(names) + "\n")
            self._names.flush()
        if out:
            self._spool.write(out)

    def _learn(self, buf: Any, valid: int, pos: int) -> bool:
        """The record at ``pos`` is of a kind whose size is not known yet: walk the whole buffer
        once with ``cuptiActivityGetNextRecord`` (CUPTI's own walk, about 1 us a record through
        ctypes; done once per new kind) and take every kind's size from the distance between a
        record and the next. Then choose the layout of each kind measured."""
        base = ctypes.addressof(buf)
        fn = self._lib.cuptiActivityGetNextRecord
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = ctypes.c_int
        rec = ctypes.c_void_p(None)  # NULL: start at the first record
        prev: tuple[int, int] | None = None  # (kind, address) of the previous record
        last: tuple[int, int] | None = None
        while fn(ctypes.c_void_p(base), ctypes.c_size_t(valid), ctypes.byref(rec)) == 0 and rec.value:
            addr = int(rec.value)
            kind = ctypes.c_uint32.from_address(addr).value
            if prev is not None and prev[0] not in self._sizes:
                self._set_size(prev[0], addr - prev[1])
            prev = last = (kind, addr)
        if last is not None and last[0] not in self._sizes:  # a kind seen only as the buffer's last record
            self._set_size(last[0], base + valid - last[1])
        kind = int.from_bytes(bytes(memoryview(buf)[pos : pos + 4]), "little")
        return kind in self._sizes

    def _set_size(self, kind: int, size: int) -> None:
        if size <= 0 or size % 8 or not 0 <= kind < 128:
            self.errors.append(f"record of kind {kind} measured at {size} bytes: ignored")
            return
        self._sizes[kind] = size
        kname = self._kinds.get(kind)
        if kname is not None and kname not in self._layouts:
            layout = self._layout(kname, size)
            if layout is not None:
                self._layouts[kname] = layout
                self._write_header()  # before any block of this kind reaches the spool

    def _layout(self, kname: str, size: int) -> dict[str, Any] | None:
        prefix = _DTYPE_PREFIX[kname]
        cands = [getattr(self.cupti, n) for n in dir(self.cupti) if re.fullmatch(prefix + r"\d*_dtype", n)]
        exact = [d for d in cands if d.itemsize == size]
        fits = sorted((d for d in cands if d.itemsize <= size), key=lambda d: d.itemsize)
        dt = exact[0] if exact else (fits[-1] if fits else None)
        if dt is None:
            self.errors.append(f"no cupti-python layout for {kname} records of {size} bytes")
            return None
        wanted = cr.TABLE_OF_KIND[kname][1]
        fields = {f: [int(dt.fields[f][1]), dt.fields[f][0].str] for f in wanted if f in dt.fields}
        return {
            "kind": next(k for k, n in self._kinds.items() if n == kname),
            "size": size,
            "dtype_itemsize": dt.itemsize,
            "fields": fields,
        }

    def _api_name(self, kname: str, cbid: int) -> str:
        domain = self.cupti.CallbackDomain.RUNTIME_API if kname == "RUNTIME" else self.cupti.CallbackDomain.DRIVER_API
        try:
            return cr.api_name(str(self.cupti.get_callback_name(domain, cbid)))
        except Exception:
            return f"<{kname.lower()} cbid {cbid}>"

    def _write_header(self) -> None:
        self._header["layouts"] = self._layouts
        write_json_atomic(self.spool_dir / f"{self.pid}.cupti.json", self._header)

    # ---- flush and stop -------------------------------------------------------------------------
    def _c(self, name: str, *args: int) -> int:
        """Call a libcupti function through ctypes, which releases the GIL for the call. Calls that
        can make CUPTI deliver buffers (flush, disable) must not hold the GIL: CUPTI may run our
        buffer callback on its own thread, which needs the GIL, while the caller waits for it.
        Holding it there hung a program at exit on the H100 (1 run in 5)."""
        fn = getattr(self._lib, name)
        fn.argtypes = [ctypes.c_uint32] * len(args)
        fn.restype = ctypes.c_int
        return int(fn(*args))

    def flush(self) -> None:
        """Ask CUPTI for the buffers it has completed (the worker spools them)."""
        if self._worker is not None:
            self._c("cuptiActivityFlushAll", 0)

    def stop(self) -> None:
        if self._worker is None:
            return
        self._header["window"][1] = self.clock()
        # flush, stop recording, flush what arrived in between (records of work still running)
        for step in ("flush", "disable", "flush"):
            try:
                if step == "flush":
                    self._c("cuptiActivityFlushAll", int(FLUSH_FORCED))
                else:
                    self._disable()
            except Exception as e:
                self.errors.append(f"{step}: {e!r}")
        n = ctypes.c_size_t(0)
        try:
            self.cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(n))
            self.dropped += int(n.value)
        except Exception:
            pass
        self._queue.put(None)
        self._worker.join(timeout=30)
        self._worker = None
        drift = self._measure_offset()[0] - int(self._header["clock"]["cupti_to_mono_ns"])
        self._header["clock"]["drift_ns_at_stop"] = drift
        self._header.update(
            records=self.records,
            dropped=self.dropped,
            refused_buffers=self.refused_buffers,
            errors=self.errors[:20],
            libcupti=loaded_libcupti(),
        )
        self._write_header()
        for f in (self._spool, self._names):
            if f is not None:
                f.close()

    def record_bytes(self) -> dict[str, int]:
        """Measured record size per kind (diagnostics for meta.json)."""
        return {n: int(lay["size"]) for n, lay in self._layouts.items()}

    def _disable(self) -> None:
        for k in self._enabled:
            try:
                self._c("cuptiActivityDisable", int(k))
            except Exception:
                pass
        self._enabled = []


def _members(enum: Any) -> dict[str, str]:
    return {str(int(m.value)): m.name for m in enum}


def _c_string(ptr: int) -> str:
    if not ptr:
        return "<unknown kernel>"
    return ctypes.string_at(ptr).decode("utf-8", "replace")


def loaded_libcupti() -> list[str]:
    """Paths of the libcupti files mapped into this process (Linux), in map order."""
    out: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)  # address perms offset dev inode [path]
                path = parts[5].strip() if len(parts) == 6 else ""
                if os.path.basename(path).startswith("libcupti.so") and path not in out:
                    out.append(path)
    except OSError:
        pass
    return out


def _load_libcupti() -> Any:
    """The very libcupti cupti-python loaded: opening the same file again returns the same
    library, so callbacks registered here and kinds enabled through cupti-python meet. A second
    copy of CUPTI would see none of cupti-python's settings."""
    mapped = loaded_libcupti()
    if mapped:
        return ctypes.CDLL(mapped[0])
    from cuda.pathfinder import load_nvidia_dynamic_lib  # cupti-python's own way of finding it

    return ctypes.CDLL(load_nvidia_dynamic_lib("cupti").abs_path)
