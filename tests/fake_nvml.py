"""A fake NVML with pynvml's names, driven by a clock, for the sampler's tests.

Each fake GPU's activity is programmed as piecewise-constant segments in dlscope's units (%,
bytes, W, MHz, bytes/s); the fake answers in NVML's own units (mW, MiB/s) so the tests check
the conversions too. GPM metrics are the exact time average of the programmed signal between
the two samples compared, and every pair compared is logged, so a test can check the 100 ms
pairing independently. Imported as a module (``tests.fake_nvml``) it behaves as one default
fake GPU on the real clock, for the helper-process tests.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

MIB = 1 << 20

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
_TEXT = {
    3: "Not Supported",
    4: "Insufficient Permissions",
    9: "Driver Not Loaded",
    13: "Function Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
    6: "Timeout",
}


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _TEXT.get(self.value, f"NVML error {self.value}")


GPM_IDS = {
    "sm_active": 2,
    "sm_occupancy": 3,
    "tensor_active": 5,
    "dram_bw_util": 10,
    "pcie_tx": 20,
    "pcie_rx": 21,
    "nvlink_rx": 60,
    "nvlink_tx": 61,
}
_GPM_SCALE = {"pcie_tx": MIB, "pcie_rx": MIB, "nvlink_rx": MIB, "nvlink_tx": MIB}  # NVML gives MiB/s

BASE = {
    "gpu_util": 3.0,
    "mem_util": 1.0,
    "mem_used": 8e9,
    "power": 120.0,
    "sm_clock": 1980.0,
    "mem_clock": 2619.0,
    "temperature": 45.0,
    "throttle_reasons": 4.0,
    "sm_active": 1.0,
    "sm_occupancy": 0.5,
    "tensor_active": 0.0,
    "dram_bw_util": 0.5,
    "pcie_tx": 1e6,
    "pcie_rx": 2e6,
    "nvlink_tx": 0.0,
    "nvlink_rx": 0.0,
}


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    sms: int = 132
    cc: tuple[int, int] = (9, 0)
    memory: int = 85_520_809_984
    gpm: bool = True
    segments: list[tuple[int, int, dict[str, float]]] = field(default_factory=list)
    base: dict[str, float] = field(default_factory=lambda: dict(BASE))
    unsupported: set[str] = field(default_factory=set)  # fast call groups or GPM metrics -> NOT_SUPPORTED
    fail_next: Counter = field(default_factory=Counter)  # call group -> transient failures to raise

    def value(self, metric: str, t: int) -> float:
        for a, b, vals in self.segments:
            if a <= t < b and metric in vals:
                return vals[metric]
        return self.base[metric]

    def average(self, metric: str, t0: int, t1: int) -> float:
        """Exact time average of the programmed signal over [t0, t1)."""
        cuts = sorted({t0, t1, *(x for a, b, _ in self.segments for x in (a, b) if t0 < x < t1)})
        total = sum((b - a) * self.value(metric, a) for a, b in zip(cuts, cuts[1:]))
        return total / (t1 - t0)


class FakeNvml:
    NVMLError = NVMLError
    NVML_SUCCESS = NVML_SUCCESS
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_NO_PERMISSION = NVML_ERROR_NO_PERMISSION
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRIC_SM_OCCUPANCY = 3
    NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
    NVML_GPM_METRIC_DRAM_BW_UTIL = 10
    NVML_GPM_METRIC_PCIE_TX_PER_SEC = 20
    NVML_GPM_METRIC_PCIE_RX_PER_SEC = 21
    NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = 60
    NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = 61

    def __init__(
        self,
        clock: Callable[[], int],
        gpus: list[FakeGpu] | None = None,
        init_error: int | None = None,
        driver: str = "580.159.04",
        cuda_driver: int = 13000,
    ) -> None:
        self.clock = clock
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.init_error = init_error
        self.driver = driver
        self.cuda_driver = cuda_driver
        self.calls: Counter = Counter()
        self.gpm_pairs: list[tuple[int, int, int]] = []  # (gpu index, t1, t2) of each comparison
        self.initialized = False

    # ---- helpers -----------------------------------------------------------------------------
    def _call(self, group: str, h: FakeGpu) -> float:
        self.calls[group] += 1
        if group in h.unsupported:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if h.fail_next[group] > 0:
            h.fail_next[group] -= 1
            raise NVMLError(NVML_ERROR_UNKNOWN)
        return self.clock()

    # ---- lifecycle and devices ------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return h.uuid

    def nvmlDeviceGetPciInfo(self, h: FakeGpu) -> Any:
        return SimpleNamespace(busId=b"00000000:19:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, h: FakeGpu) -> tuple[int, int]:
        return h.cc

    def nvmlDeviceGetAttributes_v2(self, h: FakeGpu) -> Any:
        return SimpleNamespace(multiprocessorCount=h.sms)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    # ---- cheap readings ---------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        t = self._call("utilization", h)
        return SimpleNamespace(gpu=int(h.value("gpu_util", t)), memory=int(h.value("mem_util", t)))

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        t = self._call("memory", h)
        return SimpleNamespace(total=h.memory, used=int(h.value("mem_used", t)), free=0)

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        t = self._call("power", h)
        return int(round(h.value("power", t) * 1000))  # mW

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, which: int) -> int:
        group = "sm_clock" if which == self.NVML_CLOCK_SM else "mem_clock"
        t = self._call(group, h)
        return int(h.value(group, t))

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        t = self._call("temperature", h)
        return int(h.value("temperature", t))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        t = self._call("throttle", h)
        return int(h.value("throttle_reasons", t))

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        self.calls["pcie_throughput"] += 1  # 20 ms a call on an H100: the sampler must never use it
        return 0

    # ---- GPM -----------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> Any:
        return SimpleNamespace(isSupportedDevice=int(h.gpm))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(t=None, gpu=None)

    def nvmlGpmSampleFree(self, s: Any) -> None:
        s.t = None

    def nvmlGpmSampleGet(self, h: FakeGpu, s: Any) -> Any:
        s.t = self._call("gpm", h)
        s.gpu = h
        return s

    class c_nvmlGpmMetricsGet_t:  # noqa: N801 - pynvml's name
        def __init__(self) -> None:
            self.version = 0
            self.numMetrics = 0
            self.sample1: Any = None
            self.sample2: Any = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=-1, value=0.0) for _ in range(98)]

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:
        h: FakeGpu = mg.sample2.gpu
        t1, t2 = mg.sample1.t, mg.sample2.t
        assert mg.sample1.gpu is h and t1 is not None and t2 is not None and t2 > t1
        self.gpm_pairs.append((self.gpus.index(h), t1, t2))
        by_id = {v: k for k, v in GPM_IDS.items()}
        for i in range(mg.numMetrics):
            m = mg.metrics[i]
            name = by_id[m.metricId]
            if name in h.unsupported:
                m.nvmlReturn, m.value = NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                m.nvmlReturn, m.value = NVML_SUCCESS, h.average(name, t1, t2) / _GPM_SCALE.get(name, 1)
        return mg


# As a module: one default fake GPU on the real clock (the helper-process tests import it by name).
_default = FakeNvml(time.perf_counter_ns)


def __getattr__(name: str) -> Any:
    return getattr(_default, name)
