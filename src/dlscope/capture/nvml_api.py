"""NVML for the counter sampler: which GPUs to sample, what they are, and how to read each metric.

Everything goes through an NVML *module object* with pynvml's names (nvidia-ml-py's ``pynvml``
in real use; a fake with the same surface in tests), so the code here is what the tests run.
Every way NVML can be missing (no package, no driver, no GPU, a metric the GPU lacks) becomes a
reason string, never an exception for the caller: :class:`~dlscope.errors.CollectorUnavailable`
for the whole sampler, or a per-metric entry in ``Gpu.unavailable``.

Measured on an H100 (tests/data/gpu/h100_probe_results.json): the calls used here cost 1.3 to
7.4 us each. ``nvmlDeviceGetPcieThroughput`` costs 20 ms a call and is never used: PCIe
throughput comes from GPM, which measures it between two samples for free.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CollectorUnavailable

MIB = 1024 * 1024

# Cheap per-sample readers: group -> metrics it returns (one NVML call may give several).
FAST_GROUPS: dict[str, tuple[str, ...]] = {
    "utilization": ("gpu_util", "mem_util"),
    "memory": ("mem_used",),
    "power": ("power",),
    "sm_clock": ("sm_clock",),
    "mem_clock": ("mem_clock",),
    "temperature": ("temperature",),
    "throttle": ("throttle_reasons",),
}

# GPM metrics: dlscope name -> (pynvml constant, factor to the unit in schema.METRICS).
GPM_METRICS: dict[str, tuple[str, float]] = {
    "sm_active": ("NVML_GPM_METRIC_SM_UTIL", 1.0),
    "sm_occupancy": ("NVML_GPM_METRIC_SM_OCCUPANCY", 1.0),
    "tensor_active": ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", 1.0),
    "dram_bw_util": ("NVML_GPM_METRIC_DRAM_BW_UTIL", 1.0),
    "pcie_tx": ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),  # NVML reports MiB/s
    "pcie_rx": ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    "nvlink_tx": ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
    "nvlink_rx": ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
}

FAST_METRICS: tuple[str, ...] = tuple(m for ms in FAST_GROUPS.values() for m in ms)
ALL_METRICS: tuple[str, ...] = FAST_METRICS + tuple(GPM_METRICS)

# CUDA cores per SM, to derive the SM count when NVML's device attributes are not available.
_CORES_PER_SM = {
    (7, 0): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 3): 128,
    (12, 0): 128,
    (12, 1): 128,
}

# NVML return codes that mean "this GPU or driver cannot do that", as opposed to a passing fault.
_PERMANENT = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_GPU_IS_LOST",
)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def error_text(e: BaseException) -> str:
    """A short reason for an NVML exception."""
    return _text(e) or e.__class__.__name__


def return_text(nvml: Any, code: int) -> str:
    """The text of an NVML return code (GPM reports one per metric)."""
    try:
        return error_text(nvml.NVMLError(code))
    except Exception:
        return f"NVML error {code}"


def is_permanent(nvml: Any, e: BaseException) -> bool:
    code = getattr(e, "value", None)
    return code is not None and code in {getattr(nvml, n, object()) for n in _PERMANENT}


def precheck(env: dict[str, str] | None = None) -> str | None:
    """A reason not to try NVML at all, found without loading it (cheap, in any process)."""
    cvd = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and parse_visible(cvd) == []:
        return f"no GPU is visible (CUDA_VISIBLE_DEVICES={cvd!r})"
    if driver_missing():
        return "no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing)"
    return None


def driver_missing() -> bool:
    """True where Linux says no NVIDIA driver is loaded: then this machine has no NVIDIA GPU to use."""
    return os.name == "posix" and os.path.isdir("/proc") and not os.path.exists("/proc/driver/nvidia/version")


def load(module: str = "pynvml") -> Any:
    """Import the NVML module and initialise it, or raise CollectorUnavailable(reason)."""
    try:
        nvml = importlib.import_module(module)
    except ImportError:
        raise CollectorUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError subclasses, or OSError from the loader
        raise CollectorUnavailable(f"NVML could not start: {error_text(e)}") from None
    return nvml


def parse_visible(text: str) -> list[str] | None:
    """CUDA_VISIBLE_DEVICES -> the selectors in order ([] hides every GPU). Parsing stops at
    the first invalid entry, as CUDA's does."""
    out: list[str] = []
    for part in text.split(","):
        p = part.strip()
        if not p:
            break
        if p.lstrip("-").isdigit():
            if int(p) < 0:
                break
        elif not (p.startswith("GPU-") or p.startswith("MIG-")):
            break
        out.append(p)
    return out


@dataclass
class Gpu:
    """One GPU being sampled. ``index`` is its CUDA ordinal as the program sees it."""

    index: int
    handle: Any
    info: dict[str, Any]
    gpm: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)  # metric -> reason


def open_gpus(nvml: Any, cuda_visible: str | None) -> tuple[list[Gpu], list[str]]:
    """The GPUs to sample (those the program can see) and notes about the choice."""
    notes: list[str] = []
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as e:
        raise CollectorUnavailable(f"NVML cannot count GPUs: {error_text(e)}") from None
    if count == 0:
        raise CollectorUnavailable("NVML sees no GPU")
    handles = []
    for i in range(count):
        try:
            handles.append((i, nvml.nvmlDeviceGetHandleByIndex(i)))
        except Exception as e:
            notes.append(f"GPU {i}: skipped ({error_text(e)})")
    chosen: list[tuple[int, Any]] = []
    sel = parse_visible(cuda_visible) if cuda_visible is not None else None
    if sel is None:
        chosen = handles  # CUDA ordinals match NVML's order on the usual single-model machine
    else:
        uuids = {}
        for i, h in handles:
            try:
                uuids[i] = _text(nvml.nvmlDeviceGetUUID(h))
            except Exception:
                uuids[i] = ""
        for s in sel:
            if s.startswith("MIG-"):
                notes.append(f"{s}: MIG instances are not sampled (NVML counters are per GPU)")
                continue
            match = [
                (i, h)
                for i, h in handles
                if (s.isdigit() and int(s) == i) or (not s.isdigit() and uuids[i].startswith(s))
            ]
            if match:
                chosen.append(match[0])
    if not chosen:
        raise CollectorUnavailable(
            f"none of the GPUs NVML sees is visible to the program (CUDA_VISIBLE_DEVICES={cuda_visible!r})"
        )
    gpus = [
        Gpu(cuda_index, h, device_info(nvml, h, cuda_index, nvml_index))
        for cuda_index, (nvml_index, h) in enumerate(chosen)
    ]
    for g in gpus:
        g.gpm, reason = gpm_support(nvml, g.handle, g.info.get("name", "this GPU"))
        if not g.gpm:
            for m in GPM_METRICS:
                g.unavailable[m] = reason
        g.info["gpm"] = g.gpm
    return gpus, notes


def device_info(nvml: Any, h: Any, index: int, nvml_index: int) -> dict[str, Any]:
    """What meta.json says about a GPU; fields NVML cannot give are left out."""
    info: dict[str, Any] = {"index": index, "nvml_index": nvml_index, "source": "nvml"}

    def get(key: str, fn: Callable[[], Any]) -> None:
        try:
            info[key] = fn()
        except Exception:
            pass

    get("name", lambda: _text(nvml.nvmlDeviceGetName(h)))
    get("uuid", lambda: _text(nvml.nvmlDeviceGetUUID(h)))
    get("pci_bus_id", lambda: _text(nvml.nvmlDeviceGetPciInfo(h).busId))
    get("memory_bytes", lambda: int(nvml.nvmlDeviceGetMemoryInfo(h).total))
    get("compute_capability", lambda: "{}.{}".format(*nvml.nvmlDeviceGetCudaComputeCapability(h)))
    get("driver", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
    get("cuda_driver", lambda: "{}.{}".format(*divmod(int(nvml.nvmlSystemGetCudaDriverVersion()) // 10, 100)))
    get("sms", lambda: int(nvml.nvmlDeviceGetAttributes_v2(h).multiprocessorCount))
    if "sms" not in info and "compute_capability" in info:
        cc = tuple(int(x) for x in info["compute_capability"].split("."))
        per = _CORES_PER_SM.get(cc)  # type: ignore[arg-type]  # a tuple of any length: a miss for the odd ones
        if per:
            get("sms", lambda: int(nvml.nvmlDeviceGetNumGpuCores(h)) // per)
    return info


def gpm_support(nvml: Any, h: Any, name: str) -> tuple[bool, str]:
    if not hasattr(nvml, "nvmlGpmQueryDeviceSupport"):
        return False, "this nvidia-ml-py has no GPM support (upgrade nvidia-ml-py)"
    try:
        ok = bool(nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
    except Exception as e:
        return False, f"GPM query failed: {error_text(e)}"
    return (True, "") if ok else (False, f"GPM is not supported on {name} (it needs Hopper or newer)")


def fast_readers(nvml: Any) -> dict[str, Callable[[Any], tuple[float, ...]]]:
    """group -> function(handle) returning the group's metrics in schema units."""
    # the newer name first; older nvidia-ml-py only has the "throttle" one
    throttle = (
        getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )

    def util(h: Any) -> tuple[float, ...]:
        u = nvml.nvmlDeviceGetUtilizationRates(h)
        return float(u.gpu), float(u.memory)

    return {
        "utilization": util,
        "memory": lambda h: (float(nvml.nvmlDeviceGetMemoryInfo(h).used),),
        "power": lambda h: (nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,),  # mW -> W
        "sm_clock": lambda h: (float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),),
        "mem_clock": lambda h: (float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)),),
        "temperature": lambda h: (float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),),
        "throttle": lambda h: (float(throttle(h)),),
    }


class GpmPair:
    """Two GPM sample buffers for one GPU: each new sample is compared with the previous one."""

    def __init__(self, nvml: Any, handle: Any, metrics: list[str]) -> None:
        self.nvml = nvml
        self.handle = handle
        self.metrics = metrics
        self.ids = [int(getattr(nvml, GPM_METRICS[m][0])) for m in metrics]
        self.prev = nvml.nvmlGpmSampleAlloc()
        self.cur = nvml.nvmlGpmSampleAlloc()
        self.have_prev = False
        self._request: Any = None  # the metrics-get struct, built once (rebuilding it cost CPU each pair)
        self._request_ids: list[int] = []

    def sample(self) -> None:
        """Take a sample into ``cur`` (raises NVMLError)."""
        self.nvml.nvmlGpmSampleGet(self.handle, self.cur)

    def compare(self) -> dict[str, float | str]:
        """Metrics between ``prev`` and ``cur``: value in schema units, or an error text."""
        nvml = self.nvml
        mg = self._request
        if mg is None or self._request_ids != self.ids:
            mg = self._request = nvml.c_nvmlGpmMetricsGet_t()
            mg.version = nvml.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(self.ids)
            for i, mid in enumerate(self.ids):
                mg.metrics[i].metricId = mid
            self._request_ids = list(self.ids)
        mg.sample1 = self.prev
        mg.sample2 = self.cur
        nvml.nvmlGpmMetricsGet(mg)
        out: dict[str, float | str] = {}
        for i, m in enumerate(self.metrics):
            r = mg.metrics[i]
            if int(r.nvmlReturn) == int(nvml.NVML_SUCCESS):
                out[m] = float(r.value) * GPM_METRICS[m][1]
            else:
                out[m] = return_text(nvml, int(r.nvmlReturn))
        return out

    def swap(self) -> None:
        self.prev, self.cur = self.cur, self.prev
        self.have_prev = True

    def free(self) -> None:
        for s in (self.prev, self.cur):
            try:
                self.nvml.nvmlGpmSampleFree(s)
            except Exception:
                pass
