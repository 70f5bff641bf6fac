"""How many of a kernel's blocks an SM holds at once, and how a kernel's time grows with its grid.

**Occupancy.** A block stays on one SM from start to end; how many fit at once is the least of
four limits: blocks per SM, threads (warps) per SM, registers and shared memory. The rules are
those of CUDA's occupancy calculator (``cuda_occupancy.h``, the one CUPTI and Kineto use for
Kineto's "est. achieved occupancy %"): registers are given out per warp in units of 256, from each
of the SM's four sub-partitions separately; shared memory per block in units of 128 bytes, plus
1 KiB the system keeps per block on compute capability 8.0 and later. The per-SM limits are the
CUDA C++ Programming Guide's table "Technical Specifications per Compute Capability".
``tests/test_occupancy.py`` checks the result against the occupancy CUPTI computed for every
kernel of real A100 and V100 traces.

**Waves.** A kernel of ``blocks`` blocks runs in ``ceil(blocks / (SMs x blocks per SM))`` waves;
a wave takes about as long however full it is (NVIDIA's Deep Learning Performance guide, "Wave
quantization"). Work per step ``k`` times larger launches ``k`` times the blocks, so the kernel
takes ``ceil(k w) / ceil(w)`` times as long, ``w`` its waves now: at most ``k`` times (full waves),
less where the SMs were part idle. That is the bound on how much more efficient a larger batch
makes the GPU; memory-bound kernels that already fill the memory's bandwidth with part of a wave
do not get it, so the truth lies between this and ``k`` (measured on H100: the suite's ResNet-50
took 1.87x the GPU time of a traced step for a 2x batch where waves say 1.74x, its GPT 1.86x where
waves say 1.84x; ``tests/test_occupancy.py``). A kernel whose grid follows another dimension than
the batch (LayerNorm's weight gradient: one block per group of features) keeps its time in this
model while its blocks do more work: the model's blind spot, on the optimistic side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.context import ProfileData


@dataclass(frozen=True)
class SmLimits:
    """One SM's resources (CUDA C++ Programming Guide, "Technical Specifications per Compute
    Capability"; shared memory: the largest carveout)."""

    threads: int
    blocks: int
    shared_bytes: int
    registers: int = 65536
    sub_partitions: int = 4  # each holds a quarter of the registers (cuda_occupancy.h)
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory is allocated per block in units of this many bytes
    shared_reserved: int = 0  # bytes the system keeps per block


# By compute capability. 12.x and others not listed: unknown, and the model is not used.
SM_LIMITS: dict[str, SmLimits] = {
    "7.0": SmLimits(threads=2048, blocks=32, shared_bytes=96 * 1024),  # V100
    "7.5": SmLimits(threads=1024, blocks=16, shared_bytes=64 * 1024),  # T4
    "8.0": SmLimits(threads=2048, blocks=32, shared_bytes=164 * 1024, shared_reserved=1024),  # A100
    "8.6": SmLimits(threads=1536, blocks=16, shared_bytes=100 * 1024, shared_reserved=1024),  # A10, RTX 30
    "8.7": SmLimits(threads=1536, blocks=16, shared_bytes=164 * 1024, shared_reserved=1024),  # Orin
    "8.9": SmLimits(threads=1536, blocks=24, shared_bytes=100 * 1024, shared_reserved=1024),  # L4, L40, RTX 40
    "9.0": SmLimits(threads=2048, blocks=32, shared_bytes=228 * 1024, shared_reserved=1024),  # H100, H200
    "10.0": SmLimits(threads=2048, blocks=32, shared_bytes=228 * 1024, shared_reserved=1024),  # B200
}


# Compute capabilities are NVIDIA's: ROCm's Kineto traces give AMD GPUs one too (an MI250 reads
# 9.0, with 64-thread wavefronts), so the model needs the GPU named as NVIDIA's, or found by NVML.
NVIDIA_NAME = re.compile(r"^(nvidia|tesla|quadro|geforce|titan)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Device:
    """What the wave model needs of the profile's GPU."""

    sms: int
    limits: SmLimits


def profile_device(data: ProfileData) -> Device | None:
    """The profile's GPU, when every device it lists is one NVIDIA kind with a known SM count and
    compute capability (a job's GPUs are almost always alike; with a mix, which kernel ran where
    is not worth the model's precision, and the caller scales time linearly)."""
    kinds = {
        (
            d.get("sms"),
            str(d.get("compute_capability") or ""),
            d.get("source") == "nvml" or NVIDIA_NAME.match(str(d.get("name") or "")) is not None,
        )
        for d in data.meta.devices
        if d.get("sms") or d.get("compute_capability")
    }
    if len(kinds) != 1:
        return None
    sms, cc, nvidia = kinds.pop()
    if not nvidia or not isinstance(sms, int) or sms <= 0 or cc not in SM_LIMITS:
        return None
    return Device(sms, SM_LIMITS[cc])


def _double(expr: str) -> str:
    return f"CAST({expr} AS DOUBLE)"


def blocks_per_sm_sql(limits: SmLimits, threads: str, registers: str, shared: str) -> str:
    """SQL for the blocks of one kernel an SM holds at once (0: the block does not fit), from SQL
    expressions for threads per block, registers per thread and shared bytes per block (NULL or 0:
    not a limit). All in DOUBLE: a damaged profile's launch shape must not overflow an integer."""
    threads, registers, shared = (
        _double(threads),
        _double(f"coalesce({registers}, 0)"),
        _double(f"coalesce({shared}, 0)"),
    )
    warps = f"ceil({threads} / 32)"
    per_warp = f"(ceil({registers} * 32 / {limits.register_unit}) * {limits.register_unit})"
    by_regs = (
        f"CASE WHEN {registers} <= 0 THEN {limits.blocks} ELSE "
        f"floor(floor({limits.registers // limits.sub_partitions} / {per_warp}) * {limits.sub_partitions} "
        f"/ {warps}) END"
    )
    by_shared = (
        f"CASE WHEN {shared} <= 0 THEN {limits.blocks} ELSE "
        f"floor({limits.shared_bytes} / (ceil(({shared} + {limits.shared_reserved}) / {limits.shared_unit})"
        f" * {limits.shared_unit})) END"
    )
    by_threads = f"floor({limits.threads} / ({warps} * 32))"
    return f"least({limits.blocks}, {by_threads}, {by_regs}, {by_shared})"


def wave_factor_sql(device: Device, k: int, alias: str = "k") -> str:
    """SQL for how many times longer a kernel row (``alias``: a kernels row) would run with ``k``
    times the blocks: ceil(k w) / ceil(w) waves; ``k`` itself where its launch shape is unknown or
    does not fit."""
    blocks = _double(f"{alias}.grid_x") + " * " + _double(f"{alias}.grid_y") + " * " + _double(f"{alias}.grid_z")
    threads = _double(f"{alias}.block_x") + " * " + _double(f"{alias}.block_y") + " * " + _double(f"{alias}.block_z")
    per_sm = blocks_per_sm_sql(device.limits, threads, f"{alias}.registers", f"{alias}.shared_bytes")
    waves = f"(({blocks}) / ({device.sms} * ({per_sm})))"
    return (
        f"CASE WHEN ({blocks}) > 0 AND ({threads}) > 0 AND ({per_sm}) > 0 "
        f"THEN ceil({k} * {waves}) / ceil({waves}) ELSE {k} END"
    )
