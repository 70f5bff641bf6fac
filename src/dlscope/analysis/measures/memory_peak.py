"""How much GPU memory the program holds at its peak, against the device's total (the two memory
rules judge it), and the time the host spends allocating device memory inside the steps.

Sources, by preference: ``torch_reserved`` (what PyTorch's caching allocator held, from a
trace's memory events: the program's own footprint), else NVML's ``mem_used`` (the whole device,
other processes included). The peak is taken over the samples inside the selected steps (all
samples in a profile without steps); the total is the first GPU's ``memory_bytes`` in the
profile's metadata.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.intervals import points_in_sql
from . import measured
from .basis import basis, in_gpu_windows
from .facts import facts

SOURCES = (
    ("torch_reserved", "memory reserved by PyTorch's caching allocator"),
    ("mem_used", "device memory in use (NVML, all processes)"),
)


@dataclass(frozen=True)
class MemoryPeak:
    metric: str
    source: str
    peak_bytes: float
    total_bytes: float
    peak_step: int | None

    @property
    def pct(self) -> float:
        return 100.0 * self.peak_bytes / self.total_bytes


@measured
def memory_peak(data: ProfileData) -> MemoryPeak | str:
    """The peak, or why it cannot be known."""
    d = data
    dev = facts(data).device
    if dev is None or not dev.memory_bytes:
        return "the profile does not say how much memory the GPU has"
    if not d.has("counters"):
        return "no memory counters were sampled (NVML mem_used, or a trace's memory events)"
    for metric, source in SOURCES:
        samples = f"SELECT ts_ns, value FROM counters WHERE metric = '{metric}'"
        if basis(data).has_steps:  # samples inside the selected steps (a bucketed range join)
            samples = points_in_sql(samples, "SELECT * FROM sel_steps", "p.value, i.step")
        else:
            samples = f"SELECT value, NULL::INTEGER AS step FROM ({samples})"
        # the earliest step at the peak: samples often repeat the peak value in several steps
        r = d.rows(f"""WITH x AS ({samples})
                       SELECT max(value) AS peak, min(step) FILTER (WHERE value = (SELECT max(value) FROM x)) AS step
                       FROM x""")[0]
        if r["peak"]:
            return MemoryPeak(metric, source, float(r["peak"]), float(dev.memory_bytes), r["step"])
    return "no memory counters were sampled (NVML mem_used, or a trace's memory events)"


@dataclass(frozen=True)
class AllocCalls:
    """Device memory allocation and release calls per GPU window (cudaMalloc/cudaFree ...)."""

    per_step: float
    ms_per_step: float


@measured
def alloc_calls(data: ProfileData, api_re: str) -> AllocCalls:
    """The runtime calls whose lower-case name matches ``api_re``, per GPU window."""
    b = basis(data)
    if not data.has("api") or not b.windows:
        return AllocCalls(0.0, 0.0)
    r = data.rows(f"""SELECT count(*)::DOUBLE / {b.windows} AS n,
                             coalesce(sum(a.end_ns - a.start_ns), 0)::DOUBLE / 1e6 / {b.windows} AS ms
                      FROM api a {in_gpu_windows(data, "a")}
                      WHERE regexp_matches(lower(a.name), '{api_re}')""")[0]
    return AllocCalls(float(r["n"]), float(r["ms"]))
