"""A fake CUPTI for the CUPTI collector's tests on machines without a GPU.

``FakeCupti`` has the surface of cupti-python's ``cupti.cupti`` module that dlscope uses (enums,
record dtypes, enable/flush/timestamp/dropped/callback names, subscribe); ``FakeLib`` plays
libcupti's buffer protocol through the *real* ctypes callbacks dlscope registers: it asks for
buffers with the request callback, writes raw records into them and hands them back with the
completed callback, exactly as CUPTI does from its own threads. Records are built with the
struct layouts of CUPTI 13 (the dtypes below carry the same offsets as cupti-python's), except
that kernel records are written 8 bytes longer than the newest dtype here, as a newer CUPTI
would, to exercise the "largest layout that fits" rule.
"""

from __future__ import annotations

import ctypes
import enum
import time
from typing import Any

import numpy as np

K_OFFSET = 123_456_789_000  # the fake CUPTI clock = perf_counter_ns + K_OFFSET


class ActivityKind(enum.IntEnum):
    MEMCPY = 1
    MEMSET = 2
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    SYNCHRONIZATION = 38


class CallbackDomain(enum.IntEnum):
    DRIVER_API = 1
    RUNTIME_API = 2


class ActivityThreadIdType(enum.IntEnum):
    DEFAULT = 0
    SYSTEM = 1


class ActivityMemcpyKind(enum.IntEnum):
    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    DTOD = 8
    PTOP = 10


class ActivityMemoryKind(enum.IntEnum):
    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3


class ActivitySynchronizationType(enum.IntEnum):
    UNKNOWN = 0
    EVENT_SYNCHRONIZE = 1
    STREAM_WAIT_EVENT = 2
    STREAM_SYNCHRONIZE = 3
    CONTEXT_SYNCHRONIZE = 4


class runtime_api_trace_cbid(enum.IntEnum):  # noqa: N801 - cupti-python's name
    cudaGetDevice_v3020 = 17
    cudaMemcpyAsync_v3020 = 41
    cudaLaunchKernel_v7000 = 211


class driver_api_trace_cbid(enum.IntEnum):  # noqa: N801
    cuCtxGetCurrent = 303
    cuLaunchKernel = 307


class Result(enum.IntEnum):
    SUCCESS = 0
    ERROR_INVALID_PARAMETER = 1
    ERROR_MAX_LIMIT_REACHED = 24
    ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED = 39


class cuptiError(Exception):  # noqa: N801 - cupti-python's name
    def __init__(self, status: int) -> None:
        super().__init__(f"{Result(status).name} ({status})")
        self.status = status


def _dt(size: int, **fields: tuple[int, str]) -> np.dtype:
    names = ["kind", *fields]
    return np.dtype(
        {
            "names": names,
            "formats": ["<i4"] + [f for _, f in fields.values()],
            "offsets": [0] + [o for o, _ in fields.values()],
            "itemsize": size,
        }
    )


_KERNEL = dict(
    registers_per_thread=(6, "<u2"),
    start=(16, "<u8"),
    end=(24, "<u8"),
    device_id=(40, "<u4"),
    context_id=(44, "<u4"),
    stream_id=(48, "<u4"),
    grid_x=(52, "<i4"),
    grid_y=(56, "<i4"),
    grid_z=(60, "<i4"),
    block_x=(64, "<i4"),
    block_y=(68, "<i4"),
    block_z=(72, "<i4"),
    static_shared_memory=(76, "<i4"),
    dynamic_shared_memory=(80, "<i4"),
    correlation_id=(92, "<u4"),
    name=(104, "<i8"),
)
DTYPES = {
    "activity_kernel9_dtype": _dt(208, **_KERNEL),
    "activity_kernel11_dtype": _dt(224, **_KERNEL),
    "activity_memcpy6_dtype": _dt(
        96,
        copy_kind=(4, "u1"),
        src_kind=(5, "u1"),
        dst_kind=(6, "u1"),
        bytes=(8, "<u8"),
        start=(16, "<u8"),
        end=(24, "<u8"),
        device_id=(32, "<u4"),
        context_id=(36, "<u4"),
        stream_id=(40, "<u4"),
        correlation_id=(44, "<u4"),
    ),
    "activity_memset4_dtype": _dt(
        88,
        value=(4, "<u4"),
        bytes=(8, "<u8"),
        start=(16, "<u8"),
        end=(24, "<u8"),
        device_id=(32, "<u4"),
        context_id=(36, "<u4"),
        stream_id=(40, "<u4"),
        correlation_id=(44, "<u4"),
        memory_kind=(50, "<u2"),
    ),
    "activity_api_dtype": _dt(
        40,
        cbid=(4, "<u4"),
        start=(8, "<u8"),
        end=(16, "<u8"),
        process_id=(24, "<u4"),
        thread_id=(28, "<u4"),
        correlation_id=(32, "<u4"),
        return_value=(36, "<u4"),
    ),
    "activity_synchronization2_dtype": _dt(
        56,
        type=(4, "<i4"),
        start=(8, "<u8"),
        end=(16, "<u8"),
        correlation_id=(24, "<u4"),
        context_id=(28, "<u4"),
        stream_id=(32, "<u4"),
    ),
}
# what the fake CUPTI writes per kind: (record size, dtype)
RECORDS = {
    ActivityKind.CONCURRENT_KERNEL: (232, DTYPES["activity_kernel11_dtype"]),
    ActivityKind.MEMCPY: (96, DTYPES["activity_memcpy6_dtype"]),
    ActivityKind.MEMSET: (88, DTYPES["activity_memset4_dtype"]),
    ActivityKind.RUNTIME: (40, DTYPES["activity_api_dtype"]),
    ActivityKind.DRIVER: (40, DTYPES["activity_api_dtype"]),
    ActivityKind.SYNCHRONIZATION: (56, DTYPES["activity_synchronization2_dtype"]),
}
CBID_NAMES = {
    (CallbackDomain.RUNTIME_API, 211): "cudaLaunchKernel_v7000",
    (CallbackDomain.RUNTIME_API, 41): "cudaMemcpyAsync_v3020",
    (CallbackDomain.DRIVER_API, 307): "cuLaunchKernel",
}


class _Fn:
    """A function object that, like a ctypes function, accepts argtypes/restype attributes."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)


class FakeLib:
    """libcupti's buffer side: callbacks registered through ctypes, records written into the
    buffers they hand out, ``cuptiActivityGetNextRecord`` over them."""

    def __init__(self) -> None:
        self.cuptiActivityRegisterCallbacks = _Fn(self._register)
        self.cuptiActivityGetNextRecord = _Fn(self._next_record)
        # dlscope calls these through ctypes (GIL released); they act on the module fake's state
        self.cuptiActivityFlushAll = _Fn(lambda flag: self.module.activity_flush_all(flag) or 0)
        self.cuptiActivityDisable = _Fn(lambda kind: self.module.activity_disable(kind) or 0)
        self.module: Any = None  # the FakeCupti using this lib
        self.req: Any = None
        self.done: Any = None
        self.buf_addr = 0
        self.buf_size = 0
        self.used = 0
        self.dropped = 0
        self.completed = 0
        self.next_record_calls = 0

    def _register(self, req: Any, done: Any) -> int:
        self.req, self.done = req, done
        return 0

    def _next_record(self, base: Any, valid: Any, rec_ref: Any) -> int:
        rec = rec_ref._obj  # the c_void_p passed by reference
        self.next_record_calls += 1
        if not rec.value:  # NULL: the first record
            rec.value = base.value
            return 0
        kind = ctypes.c_uint32.from_address(rec.value).value
        nxt = rec.value + RECORDS[ActivityKind(kind)][0]
        if nxt >= base.value + valid.value:
            return int(Result.ERROR_MAX_LIMIT_REACHED)
        rec.value = nxt
        return 0

    def emit(self, kind: ActivityKind, **values: Any) -> None:
        size, dt = RECORDS[kind]
        if self.buf_addr and self.used + size > self.buf_size:
            self.complete()
        if not self.buf_addr:
            b, s, m = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
            self.req(ctypes.byref(b), ctypes.byref(s), ctypes.byref(m))
            if not b.value or s.value < size:
                self.dropped += 1  # no buffer: CUPTI drops the record and counts it
                return
            self.buf_addr, self.buf_size, self.used = b.value, s.value, 0
        rec = np.zeros(1, dtype=dt)
        rec["kind"] = int(kind)
        for k, v in values.items():
            rec[k] = v
        raw = rec.tobytes() + bytes(size - dt.itemsize)
        ctypes.memmove(self.buf_addr + self.used, raw, size)
        self.used += size

    def complete(self) -> None:
        if self.buf_addr:
            addr, size, used = self.buf_addr, self.buf_size, self.used
            self.buf_addr = 0
            self.completed += 1
            self.done(None, 0, addr, size, used)


class FakeCupti:
    """The ``cupti.cupti`` module surface."""

    ActivityKind = ActivityKind
    CallbackDomain = CallbackDomain
    ActivityThreadIdType = ActivityThreadIdType
    ActivityMemcpyKind = ActivityMemcpyKind
    ActivityMemoryKind = ActivityMemoryKind
    ActivitySynchronizationType = ActivitySynchronizationType
    Result = Result
    cuptiError = cuptiError
    runtime_api_trace_cbid = runtime_api_trace_cbid
    driver_api_trace_cbid = driver_api_trace_cbid

    def __init__(self, lib: FakeLib, other_client: bool = False) -> None:
        self.lib = lib
        lib.module = self
        self.other_client = other_client
        self.enabled: set[int] = set()
        self.api_off: set[tuple[str, int]] = set()
        self.thread_id_type = 0
        for name, dt in DTYPES.items():
            setattr(self, name, dt)

    def subscribe(self, callback: Any, userdata: Any) -> int:
        if self.other_client:
            raise cuptiError(int(Result.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))
        return 1

    def unsubscribe(self, handle: int) -> None:
        pass

    def set_thread_id_type(self, t: int) -> None:
        self.thread_id_type = int(t)

    def activity_enable(self, kind: int) -> None:
        self.enabled.add(int(kind))

    def activity_enable_runtime_api(self, cbid: int, on: int) -> None:
        if not on:
            self.api_off.add(("runtime", cbid))

    def activity_enable_driver_api(self, cbid: int, on: int) -> None:
        if not on:
            self.api_off.add(("driver", cbid))

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(int(kind))

    def activity_flush_all(self, flag: int) -> None:
        if flag:  # forced: hand over the buffer being filled too
            self.lib.complete()

    def get_timestamp(self) -> int:
        return time.perf_counter_ns() + K_OFFSET

    def activity_get_num_dropped_records(self, ctx: int, stream: int, addr: int) -> None:
        ctypes.c_size_t.from_address(addr).value = self.lib.dropped
        self.lib.dropped = 0

    def get_callback_name(self, domain: int, cbid: int) -> str:
        return CBID_NAMES.get((CallbackDomain(domain), cbid), f"api{cbid}")
