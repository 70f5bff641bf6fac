"""What the GPU could do: peak-throughput ratios between precisions, from vendors' datasheets.

The tensor-core and mixed-precision rules bound their savings with these ratios: a GEMM cannot
get faster than the ratio of the peak dense throughputs of the two paths, and real GEMMs reach a
smaller share of the faster peak, so the saving they give is an upper bound. Ratios are of dense
(not sparse) peaks:

==========  =====================================  ==========  ==========  ===========
capability  datasheet                              TF32/FP32   16-bit/FP32  16-bit/TF32
==========  =====================================  ==========  ==========  ===========
7.0         V100 SXM2: FP32 15.7, FP16 TC 125      (no TF32)   8.0         -
7.5         T4: FP32 8.1, FP16 TC 65               (no TF32)   8.0         -
8.0         A100: FP32 19.5, TF32 156, BF16 312    8.0         16.0        2.0
8.6         A10: FP32 31.2, TF32 62.5, BF16 125    2.0         4.0         2.0
8.9         L40S: FP32 91.6, TF32 183, BF16 366    2.0         4.0         2.0
9.0         H100 SXM: FP32 67, TF32 495, BF16 989  7.4         14.8        2.0
==========  =====================================  ==========  ==========  ===========

(TFLOPS.) Other NVIDIA GPUs get A100's ratios. AMD Instinct (MI250X: FP32 matrix 95.7, FP16/BF16
383) gets 4.0 from fp32 matrix-core math to 16 bits; its fp32 MFMA is already "tensor-core" math.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# compute capability -> (TF32 / FP32 CUDA cores, 16-bit / FP32 CUDA cores), dense peaks
NVIDIA_RATIOS: dict[tuple[int, int], tuple[float | None, float]] = {
    (7, 0): (None, 8.0),
    (7, 5): (None, 8.0),
    (8, 0): (8.0, 16.0),
    (8, 6): (2.0, 4.0),
    (8, 9): (2.0, 4.0),
    (9, 0): (7.4, 14.8),
}
DEFAULT_NVIDIA = (8.0, 16.0)  # A100's
LOW_OVER_TF32 = 2.0           # 16-bit / TF32 dense peak on every NVIDIA part above
AMD_LOW_OVER_FP32_MATRIX = 4.0  # MI250X: 383 / 95.7 TFLOPS


@dataclass(frozen=True)
class Device:
    """The profile's first GPU as its metadata describes it."""

    name: str
    vendor: str  # 'nvidia', 'amd' or 'other'
    capability: tuple[int, int] | None
    memory_bytes: int | None

    @property
    def has_tensor_cores(self) -> bool:
        if self.vendor == "amd":
            return True  # matrix cores (MFMA) on every Instinct the corpus holds; names decide per kernel
        return self.vendor == "nvidia" and (self.capability is None or self.capability >= (7, 0))

    @property
    def has_tf32(self) -> bool:
        return self.vendor == "nvidia" and (self.capability is None or self.capability >= (8, 0))

    @property
    def has_bf16(self) -> bool:
        return self.vendor == "amd" or (self.vendor == "nvidia" and (self.capability is None or self.capability >= (8, 0)))

    def tf32_speedup(self) -> float | None:
        """Peak TF32 tensor-core / FP32 CUDA-core throughput; None without TF32."""
        if not self.has_tf32:
            return None
        return NVIDIA_RATIOS.get(self.capability or (0, 0), DEFAULT_NVIDIA)[0] or DEFAULT_NVIDIA[0]

    def low_speedup(self, from_tensor_cores: bool) -> float:
        """Peak 16-bit tensor-core throughput over the fp32 path the work takes now."""
        if self.vendor == "amd":
            return AMD_LOW_OVER_FP32_MATRIX
        if from_tensor_cores:
            return LOW_OVER_TF32
        return NVIDIA_RATIOS.get(self.capability or (0, 0), DEFAULT_NVIDIA)[1]


def ratios_label(dev: Device | None) -> str:
    """The GPU the throughput ratios are for, as evidence text: its name, and whether A100's
    ratios stand in for a GPU the table above lacks."""
    if dev is None:
        return "this GPU (A100's ratios assumed: the profile does not name its GPU)"
    if dev.vendor == "nvidia" and dev.capability not in NVIDIA_RATIOS:
        return f"{dev.name} (A100's ratios assumed: dlscope's datasheet table lacks this GPU)"
    return dev.name


def _capability(v: Any) -> tuple[int, int] | None:
    try:
        major, minor = str(v).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def device_of(devices: list[dict[str, Any]]) -> Device | None:
    """The first GPU in ``meta.devices`` (entries for one GPU from several sources merged)."""
    gpus = [d for d in devices if isinstance(d, dict) and d.get("name")]
    if not gpus:
        return None
    name = str(gpus[0]["name"])
    cap = next((c for c in (_capability(d.get("compute_capability")) for d in gpus) if c), None)
    mem = next((int(d["memory_bytes"]) for d in gpus if d.get("memory_bytes")), None)
    low = name.lower()
    vendor = "nvidia" if ("nvidia" in low or "tesla" in low or "geforce" in low or "quadro" in low) else \
        "amd" if ("amd" in low or "instinct" in low or "radeon" in low) else "other"
    if vendor == "amd":
        cap = None  # ROCm traces report a CUDA-style capability that means nothing here
    return Device(name, vendor, cap, mem)
