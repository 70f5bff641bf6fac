"""What the GPU could do: each GPU's peak throughput and memory bandwidth, from vendors' datasheets.

One table, :data:`GPUS`, keyed by GPU name (the name NVML, CUDA and Kineto's ``deviceProperties``
give: H100 SXM, H100 PCIe and H200 share compute capability 9.0, so the name decides). Every peak
is the datasheet's *dense* figure: where a datasheet gives only the 2:4-sparse figure (marked
``*`` there), the dense one is half of it. Peaks are at the boost clock; a GPU held at a lower clock
(power or thermal limits, ``nvidia-smi -lgc``) reaches less. Units: TFLOP/s (TOPS for int8) and
TB/s (10**12 bytes per second).

Who reads it:

* the ``roofline`` report: the peak of each op's precision and the memory bandwidth
  (:meth:`GpuPeaks.compute_peak`, :attr:`GpuPeaks.hbm_tbs`). A GPU the table lacks, a partition
  of one (a MIG slice, fewer SMs than the datasheet's GPU) or a name that does not decide between
  two GPUs gets no peaks: :func:`lookup` says why, and nothing is guessed;
* the tensor-core and mixed-precision rules, through :class:`Device`: a GEMM cannot get faster than
  the ratio of the dense peaks of the two paths, and real GEMMs reach a smaller share of the faster
  peak, so the saving they give is an upper bound. Ratios (to one decimal, as the rules' evidence
  states them) come from the device's own row when the table has it, otherwise from the GPU that
  stands for its compute capability (:data:`CAPABILITY_GPU`), otherwise A100's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuPeaks:
    """Dense peaks of one GPU as the runtime sees it (one device). TFLOP/s; ``int8`` in TOPS;
    ``hbm_tbs`` in TB/s. None where the GPU has no such path or its datasheet gives no figure."""

    name: str
    vendor: str  # 'nvidia' or 'amd'
    sms: int  # SMs (NVIDIA) or compute units (AMD) of one device: a device with fewer is a partition
    hbm_tbs: float  # device memory bandwidth (HBM or GDDR)
    fp32: float  # CUDA cores (NVIDIA) / vector units (AMD)
    fp64: float | None
    fp64_matrix: float | None  # FP64 tensor cores (DMMA) / matrix cores
    fp32_matrix: float | None  # AMD matrix cores (MFMA) in fp32; NVIDIA has none (TF32 is its fp32 tensor path)
    tf32: float | None
    fp16: float | None
    bf16: float | None
    fp8: float | None
    int8: float | None
    source: str  # the datasheet

    def compute_peak(self, dtype: str, matrix: bool, tensor_cores: bool) -> tuple[float | None, str]:
        """The peak (TFLOP/s) an op of ``dtype`` is held to, and its label. ``matrix``: a matrix
        product (GEMM, convolution, attention), which the matrix units can run; elementwise work,
        norms and reductions run on the CUDA cores / vector units in fp32 (fp64 for fp64 data).
        ``tensor_cores``: the op's kernels are tensor-core kernels (by name): fp32 matrix work
        then runs as TF32 (NVIDIA), else on the CUDA cores; fp64 as DMMA, else on the CUDA cores."""
        if not matrix:
            if dtype == "float64":
                return self.fp64, "FP64"
            return self.fp32, "FP32 (CUDA cores)" if self.vendor == "nvidia" else "FP32 (vector)"
        if dtype in ("float16",):
            return self.fp16, "FP16 tensor" if self.vendor == "nvidia" else "FP16 matrix"
        if dtype == "bfloat16":
            return self.bf16, "BF16 tensor" if self.vendor == "nvidia" else "BF16 matrix"
        if dtype.startswith("float8"):
            return self.fp8, "FP8 tensor" if self.vendor == "nvidia" else "FP8 matrix"
        if dtype in ("int8", "uint8"):
            return self.int8, "INT8 tensor (TOPS)" if self.vendor == "nvidia" else "INT8 matrix (TOPS)"
        if dtype == "float32":
            if self.vendor == "amd":
                return self.fp32_matrix, "FP32 matrix"
            if tensor_cores:
                return self.tf32, "TF32 tensor"
            return self.fp32, "FP32 (CUDA cores)"
        if dtype == "float64":
            if tensor_cores or self.vendor == "amd":
                return self.fp64_matrix, "FP64 tensor" if self.vendor == "nvidia" else "FP64 matrix"
            return self.fp64, "FP64"
        return None, dtype


def _nv(
    name: str,
    sms: int,
    hbm_tbs: float,
    fp32: float,
    fp64: float | None,
    fp64_tensor: float | None,
    tf32: float | None,
    fp16: float | None,
    bf16: float | None,
    fp8: float | None,
    int8: float | None,
    source: str,
) -> GpuPeaks:
    return GpuPeaks(name, "nvidia", sms, hbm_tbs, fp32, fp64, fp64_tensor, None, tf32, fp16, bf16, fp8, int8, source)


# NVIDIA V100 Tensor Core GPU datasheet (2020), "Specifications":
# https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf
# V100 SXM2: double precision 7.8, single precision 15.7, Tensor Performance 125 TFLOPS (fp16 in,
# fp32 accumulate); HBM2 900 GB/s; 80 SMs. V100 PCIe: 7, 14, 112 TFLOPS, 900 GB/s. V100S PCIe:
# 8.2, 16.4, 130 TFLOPS, 1,134 GB/s. No TF32, BF16, FP8 or int8 tensor cores.
V100_SXM2 = _nv("V100 SXM2", 80, 0.900, 15.7, 7.8, None, None, 125.0, None, None, None, "NVIDIA V100 datasheet (2020)")
V100_PCIE = _nv("V100 PCIe", 80, 0.900, 14.0, 7.0, None, None, 112.0, None, None, None, "NVIDIA V100 datasheet (2020)")
V100S_PCIE = _nv(
    "V100S PCIe", 80, 1.134, 16.4, 8.2, None, None, 130.0, None, None, None, "NVIDIA V100 datasheet (2020)"
)
# NVIDIA T4 Tensor Core GPU datasheet:
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf
# single precision 8.1 TFLOPS, mixed precision (FP16/FP32) 65 TFLOPS, INT8 130 TOPS; 320+ GB/s; 40 SMs.
T4 = _nv("T4", 40, 0.320, 8.1, None, None, None, 65.0, None, None, 130.0, "NVIDIA T4 datasheet")
# NVIDIA A100 Tensor Core GPU datasheet (2021):
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
# FP64 9.7, FP64 Tensor Core 19.5, FP32 19.5, TF32 156 (312*), BF16 and FP16 312 (624*), INT8 624
# (1,248*) TOPS; GPU memory bandwidth: 40GB PCIe 1,555 GB/s, 80GB PCIe 1,935 GB/s, 40GB SXM
# 1,555 GB/s, 80GB SXM 2,039 GB/s; 108 SMs (A100 whitepaper).
A100_SXM_40 = _nv(
    "A100 SXM 40GB", 108, 1.555, 19.5, 9.7, 19.5, 156.0, 312.0, 312.0, None, 624.0, "NVIDIA A100 datasheet (2021)"
)
A100_SXM_80 = _nv(
    "A100 SXM 80GB", 108, 2.039, 19.5, 9.7, 19.5, 156.0, 312.0, 312.0, None, 624.0, "NVIDIA A100 datasheet (2021)"
)
A100_PCIE_40 = _nv(
    "A100 PCIe 40GB", 108, 1.555, 19.5, 9.7, 19.5, 156.0, 312.0, 312.0, None, 624.0, "NVIDIA A100 datasheet (2021)"
)
A100_PCIE_80 = _nv(
    "A100 PCIe 80GB", 108, 1.935, 19.5, 9.7, 19.5, 156.0, 312.0, 312.0, None, 624.0, "NVIDIA A100 datasheet (2021)"
)
# NVIDIA A10 Tensor Core GPU datasheet:
# https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/datasheet-new/nvidia-a10-datasheet.pdf
# FP32 31.2, TF32 62.5 (125*), BF16 and FP16 125 (250*), INT8 250 (500*) TOPS; 600 GB/s; 72 SMs.
A10 = _nv("A10", 72, 0.600, 31.2, None, None, 62.5, 125.0, 125.0, None, 250.0, "NVIDIA A10 datasheet")
# NVIDIA H100 Tensor Core GPU datasheet (2023):
# https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
# H100 SXM: FP64 34, FP64 Tensor Core 67, FP32 67, TF32 989*, BF16 and FP16 1,979*, FP8 3,958*,
# INT8 3,958* TOPS; 3.35 TB/s; 132 SMs. H100 PCIe: 26, 51, 51, 756*, 1,513*, 3,026*, 3,026*;
# 2 TB/s; 114 SMs. H100 NVL: 30, 60, 60, 835*, 1,671*, 3,341*, 3,341*; 3.9 TB/s; 132 SMs.
# (* with sparsity: the dense peak is half.)
H100_SXM = _nv(
    "H100 SXM", 132, 3.35, 67.0, 34.0, 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, "NVIDIA H100 datasheet (2023)"
)
H100_PCIE = _nv(
    "H100 PCIe", 114, 2.0, 51.0, 26.0, 51.0, 378.0, 756.5, 756.5, 1513.0, 1513.0, "NVIDIA H100 datasheet (2023)"
)
H100_NVL = _nv(
    "H100 NVL", 132, 3.9, 60.0, 30.0, 60.0, 417.5, 835.5, 835.5, 1670.5, 1670.5, "NVIDIA H100 datasheet (2023)"
)
# NVIDIA H200 Tensor Core GPU datasheet (2024): https://www.nvidia.com/en-us/data-center/h200/
# H200 SXM: FP64 34, FP64 Tensor Core 67, FP32 67, TF32 989*, BF16 and FP16 1,979*, FP8 3,958*,
# INT8 3,958* TOPS; 141 GB HBM3e at 4.8 TB/s. H200 NVL: 30, 60, 60, 835*, 1,671*, 3,341*, 3,341*;
# 4.8 TB/s. 132 SMs (the GH100 of H100 SXM).
H200_SXM = _nv("H200", 132, 4.8, 67.0, 34.0, 67.0, 494.5, 989.5, 989.5, 1979.0, 1979.0, "NVIDIA H200 datasheet (2024)")
H200_NVL = _nv(
    "H200 NVL", 132, 4.8, 60.0, 30.0, 60.0, 417.5, 835.5, 835.5, 1670.5, 1670.5, "NVIDIA H200 datasheet (2024)"
)
# NVIDIA L4 Tensor Core GPU datasheet (2023): https://www.nvidia.com/en-us/data-center/l4/
# FP32 30.3, TF32 120*, BF16 and FP16 242*, FP8 485*, INT8 485* TOPS (the datasheet lists sparse
# figures only); 300 GB/s GDDR6; 58 SMs. FP64 is not given.
L4 = _nv("L4", 58, 0.300, 30.3, None, None, 60.0, 121.0, 121.0, 242.5, 242.5, "NVIDIA L4 datasheet (2023)")
# NVIDIA L40S datasheet (2023): https://www.nvidia.com/en-us/data-center/l40s/
# FP32 91.6, TF32 183 (366*), BF16 and FP16 362.05 (733*), FP8 733 (1,466*), INT8 733 (1,466*) TOPS;
# 864 GB/s GDDR6; 142 SMs. FP64 is not given.
L40S = _nv("L40S", 142, 0.864, 91.6, None, None, 183.0, 362.05, 362.05, 733.0, 733.0, "NVIDIA L40S datasheet (2023)")
# NVIDIA L40 datasheet (2022): https://www.nvidia.com/en-us/data-center/l40/
# FP32 90.5, TF32 90.5 (181*), BF16 and FP16 181.05 (362.1*), FP8 362 (724*), INT8 362 (724*) TOPS;
# 864 GB/s; 142 SMs.
L40 = _nv("L40", 142, 0.864, 90.5, None, None, 90.5, 181.05, 181.05, 362.0, 362.0, "NVIDIA L40 datasheet (2022)")
# AMD Instinct MI250X data sheet: https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html
# per OAM package: FP64 vector 47.9, FP64 matrix 95.7, FP32 vector 47.9, FP32 matrix 95.7, FP16 and
# BF16 383, INT8 383 TOPS; 3.2 TB/s (3,276.8 GB/s) HBM2e; 220 CUs. The package holds two graphics
# compute dies (GCDs) and ROCm shows each as its own GPU with 110 CUs and half the HBM (1.6 TB/s
# per GCD: https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi250.html): a profile's device is
# one GCD, so its peaks are half the package's. No TF32 or FP8.
MI250X = GpuPeaks(
    "MI250X (one GCD)",
    "amd",
    110,
    3.2768 / 2,
    47.9 / 2,
    47.9 / 2,
    95.7 / 2,
    95.7 / 2,
    None,
    383.0 / 2,
    383.0 / 2,
    None,
    383.0 / 2,
    "AMD Instinct MI250X data sheet",
)
# AMD Instinct MI300X data sheet:
# https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf
# FP64 vector 81.7, FP64 matrix 163.4, FP32 vector 163.4, FP32 matrix 163.4, TF32 653.7, FP16 and
# BF16 1,307.4, FP8 2,614.9, INT8 2,614.9 TOPS (dense; with sparsity twice these); 5.3 TB/s HBM3;
# 304 CUs, one device in the default (SPX) partition mode.
MI300X = GpuPeaks(
    "MI300X",
    "amd",
    304,
    5.3,
    163.4,
    81.7,
    163.4,
    163.4,
    653.7,
    1307.4,
    1307.4,
    2614.9,
    2614.9,
    "AMD Instinct MI300X data sheet",
)

# Every GPU above, by the name patterns (case-insensitive) of the device names NVML, CUDA, ROCm and
# Kineto's deviceProperties give ('NVIDIA H100 80GB HBM3', 'Tesla V100-SXM2-16GB', 'AMD Instinct
# MI300X'). The first pattern that matches decides; names no pattern matches are unknown.
GPUS: tuple[tuple[str, GpuPeaks], ...] = (
    (r"V100-SXM2", V100_SXM2),
    (r"V100-PCIE", V100_PCIE),
    (r"V100S-PCIE", V100S_PCIE),
    (r"(^|\s)T4$", T4),
    (r"A100-SXM4?-40GB", A100_SXM_40),
    (r"A100-SXM4?-80GB", A100_SXM_80),
    (r"A100-PCIE-40GB", A100_PCIE_40),
    (r"A100 80GB PCIe", A100_PCIE_80),
    (r"(^|\s)A10$", A10),
    (r"H100 80GB HBM3$|H100 SXM", H100_SXM),
    (r"H100 PCIe", H100_PCIE),
    (r"H100 NVL", H100_NVL),
    (r"(^|\s)H200$|H200 SXM", H200_SXM),
    (r"H200 NVL", H200_NVL),
    (r"(^|\s)L4$", L4),
    (r"L40S", L40S),
    (r"(^|\s)L40$", L40),
    (r"MI250X( OAM)?$", MI250X),
    (r"MI300X( OAM)?$", MI300X),
)
# names that more than one GPU reports: they do not decide
_AMBIGUOUS = (r"MI250X\s*/\s*MI250",)  # ROCm's name for both the MI250X and the MI250


@dataclass(frozen=True)
class Lookup:
    """The peaks of a profile's GPU, or why there are none."""

    peaks: GpuPeaks | None
    why_not: str = ""


def lookup(name: str | None, sms: int | None = None) -> Lookup:
    """The datasheet peaks of the GPU named ``name`` (with ``sms`` SMs or CUs when known)."""
    if not name:
        return Lookup(None, "the profile does not name its GPU")
    if re.search(r"\bMIG\b", name):
        return Lookup(None, f"{name} is a MIG slice: its share of the GPU's peaks is not in the datasheets")
    if any(re.search(p, name, re.IGNORECASE) for p in _AMBIGUOUS):
        return Lookup(None, f"the name {name!r} does not say which GPU it is")
    for pattern, peaks in GPUS:
        if re.search(pattern, name, re.IGNORECASE):
            if sms is not None and sms != peaks.sms:
                return Lookup(
                    None,
                    f"{name} shows {sms} {'CUs' if peaks.vendor == 'amd' else 'SMs'}, the "
                    f"datasheet's {peaks.name} has {peaks.sms}: a partition or another variant",
                )
            return Lookup(peaks)
    return Lookup(None, f"{name} is not in dlscope's table of datasheet peaks (analysis/core/hardware.py)")


# The GPU whose datasheet gives the throughput ratios of each NVIDIA compute capability, for GPUs the
# table lacks by name (an RTX 4090 gets L40S's ratios, an A30 A100's).
CAPABILITY_GPU: dict[tuple[int, int], GpuPeaks] = {
    (7, 0): V100_SXM2,
    (7, 5): T4,
    (8, 0): A100_SXM_80,
    (8, 6): A10,
    (8, 9): L40S,
    (9, 0): H100_SXM,
}


def _ratios(p: GpuPeaks) -> tuple[float | None, float]:
    """(TF32 / FP32 CUDA cores, 16-bit / FP32 CUDA cores), dense peaks, to one decimal."""
    low = max(x for x in (p.fp16, p.bf16) if x is not None)
    return (round(p.tf32 / p.fp32, 1) if p.tf32 else None), round(low / p.fp32, 1)


# compute capability -> (TF32 / FP32 CUDA cores, 16-bit / FP32 CUDA cores), dense peaks
NVIDIA_RATIOS: dict[tuple[int, int], tuple[float | None, float]] = {c: _ratios(p) for c, p in CAPABILITY_GPU.items()}
DEFAULT_NVIDIA = _ratios(A100_SXM_80)
LOW_OVER_TF32 = 2.0  # 16-bit / TF32 dense peak on every NVIDIA GPU of the table (L40S: 362.05 / 183 = 1.98)
# AMD: 16-bit / fp32 matrix-core peak of a GPU the table lacks: MI250X's (383 / 95.7)
AMD_LOW_OVER_FP32_MATRIX = round(383.0 / 95.7, 1)


@dataclass(frozen=True)
class Device:
    """The profile's first GPU as its metadata describes it."""

    name: str
    vendor: str  # 'nvidia', 'amd' or 'other'
    capability: tuple[int, int] | None
    memory_bytes: int | None
    sms: int | None = None

    @property
    def peaks(self) -> GpuPeaks | None:
        """Its datasheet peaks, None when the table lacks it (:func:`lookup` says why)."""
        return lookup(self.name, self.sms).peaks

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
        return self.vendor == "amd" or (
            self.vendor == "nvidia" and (self.capability is None or self.capability >= (8, 0))
        )

    def _nvidia_ratios(self) -> tuple[float | None, float]:
        p = self.peaks
        if p is not None and p.vendor == "nvidia":
            return _ratios(p)
        return NVIDIA_RATIOS.get(self.capability or (0, 0), DEFAULT_NVIDIA)

    def tf32_speedup(self) -> float | None:
        """Peak TF32 tensor-core / FP32 CUDA-core throughput; None without TF32."""
        if not self.has_tf32:
            return None
        return self._nvidia_ratios()[0] or DEFAULT_NVIDIA[0]

    def low_speedup(self, from_tensor_cores: bool) -> float:
        """Peak 16-bit tensor-core throughput over the fp32 path the work takes now."""
        if self.vendor == "amd":
            p = self.peaks
            if p is not None and p.fp32_matrix and p.fp16:
                return round(p.fp16 / p.fp32_matrix, 1)
            return AMD_LOW_OVER_FP32_MATRIX
        if from_tensor_cores:
            return LOW_OVER_TF32
        return self._nvidia_ratios()[1]


def ratios_label(dev: Device | None) -> str:
    """The GPU the throughput ratios are for, as evidence text: its name, and whether A100's
    ratios stand in for a GPU the table above lacks."""
    if dev is None:
        return "this GPU (A100's ratios assumed: the profile does not name its GPU)"
    if dev.vendor == "nvidia" and dev.peaks is None and dev.capability not in NVIDIA_RATIOS:
        return f"{dev.name} (A100's ratios assumed: dlscope's datasheet table lacks this GPU)"
    return dev.name


def _capability(v: Any) -> tuple[int, int] | None:
    try:
        major, minor = str(v).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def device_of(devices: list[dict[str, Any]]) -> Device | None:
    """The first GPU in ``meta.devices`` (entries for one GPU from several sources merged)."""
    gpus = [d for d in devices if isinstance(d, dict) and d.get("name")]
    if not gpus:
        return None
    name = str(gpus[0]["name"])
    cap = next((c for c in (_capability(d.get("compute_capability")) for d in gpus) if c), None)
    mem = next((int(d["memory_bytes"]) for d in gpus if d.get("memory_bytes")), None)
    sms = next((s for s in (_int(d.get("sms")) for d in gpus if d.get("name") == name) if s), None)
    low = name.lower()
    vendor = (
        "nvidia"
        if ("nvidia" in low or "tesla" in low or "geforce" in low or "quadro" in low)
        else "amd"
        if ("amd" in low or "instinct" in low or "radeon" in low)
        else "other"
    )
    if vendor == "amd":
        cap = None  # ROCm traces report a CUDA-style capability that means nothing here
    return Device(name, vendor, cap, mem, sms)
