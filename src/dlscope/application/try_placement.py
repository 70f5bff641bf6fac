"""Where `dlscope try` puts its runs: one GPU per concurrent round, and a share of the CPUs each.

A program that uses one GPU gives one round per GPU of the host at a time: each round's runs (the
baseline and every fix) go one after another to the same GPU, so its pairs compare runs on the same
device, and the rounds on different GPUs run at once. Each concurrent round gets its own slice of
the CPUs (its processes' affinity), so that one round's data loading does not slow another's.

``--gpus`` names the GPUs (CUDA ordinals or UUIDs, as CUDA_VISIBLE_DEVICES takes them), or ``auto``
(the default): the visible GPUs that NVML shows idle (no compute process, utilization under
:data:`IDLE_UTIL_PCT`), named by UUID so that the order CUDA gives them does not matter. Rounds stay
on one GPU, one after another, when fewer than two GPUs qualify, when NVML is not there, and when the
command launches several processes itself (torchrun and its kin give each rank its own GPU).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..capture.launcher import Placement
from ..errors import UsageError

IDLE_UTIL_PCT = 10  # an idle GPU reads 0%; a GPU between a job's steps may read a few percent
# launchers that start one process per GPU: their command's rounds cannot share out the GPUs
DISTRIBUTED_LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed")
MULTI_PROCESS_RUNNERS = ("mpirun", "mpiexec", "srun", "horovodrun")


def launches_ranks(cmd: Sequence[str]) -> bool:
    """Whether ``cmd`` starts several ranks itself (and so wants every GPU it can see)."""
    # the launcher is the program itself (torchrun, mpirun ...) or a module run by Python (-m torch.distributed.run)
    return any(Path(w).name in DISTRIBUTED_LAUNCHERS + MULTI_PROCESS_RUNNERS for w in cmd[:4])


def split_cpus(n: int, cpus: Sequence[int] | None = None) -> list[frozenset[int]]:
    """``n`` disjoint, contiguous shares of ``cpus`` (default: this process's affinity), as even as
    they can be; an empty list when there are fewer CPUs than shares (then nothing is pinned)."""
    have = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if n < 1 or len(have) < n:
        return []
    return [frozenset(have[i * len(have) // n : (i + 1) * len(have) // n]) for i in range(n)]


def parse_gpus(text: str) -> list[str] | None:
    """``--gpus``: None for ``auto``; else the GPUs named (CUDA ordinals or UUIDs), comma-separated."""
    if text.strip().lower() == "auto":
        return None
    names = [g.strip() for g in text.split(",") if g.strip()]
    if not names:
        raise UsageError("--gpus takes 'auto' or a comma-separated list of GPUs (e.g. 0,1)")
    for g in names:
        if not (g.isdigit() or g.startswith(("GPU-", "MIG-"))):
            raise UsageError(f"--gpus: {g!r} is neither a CUDA ordinal nor a GPU UUID")
    if len(set(names)) < len(names):
        raise UsageError("--gpus names a GPU twice")
    return names


def idle_gpus(nvml_module: str = "pynvml") -> list[str]:
    """The UUIDs of the GPUs this process can see that NVML shows idle ([] without NVML)."""
    from ..capture.nvml_api import load
    from ..errors import CollectorUnavailable

    try:
        nvml = load(nvml_module)
    except CollectorUnavailable:
        return []
    try:  # NVML is let go after: the runs' own samplers start and stop it in this process
        return _idle(nvml)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _idle(nvml: Any) -> list[str]:
    from ..capture.nvml_api import open_gpus
    from ..errors import CollectorUnavailable

    try:
        gpus, _ = open_gpus(nvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except CollectorUnavailable:
        return []
    idle = []
    for g in gpus:
        try:
            busy = nvml.nvmlDeviceGetComputeRunningProcesses(g.handle)
            util = nvml.nvmlDeviceGetUtilizationRates(g.handle).gpu
            uuid = nvml.nvmlDeviceGetUUID(g.handle)
        except Exception:  # noqa: BLE001 - a GPU NVML cannot read is not offered
            continue
        if not busy and util < IDLE_UTIL_PCT:
            idle.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
    return idle


def placements(cmd: Sequence[str], gpus: list[str] | None, nvml_module: str = "pynvml") -> list[Placement]:
    """One placement per concurrent round: [] to run the rounds one after another, as on one GPU.
    ``gpus``: the GPUs asked for (None: ``auto``)."""
    if gpus is None:
        if launches_ranks(cmd):
            return []
        gpus = idle_gpus(nvml_module)
        if len(gpus) < 2:
            return []
    elif launches_ranks(cmd):
        raise UsageError("--gpus shares the GPUs out among rounds of a one-process program; this command starts ranks")
    if len(gpus) < 2:
        return [Placement(gpus=gpus[0])] if gpus else []
    cpus = split_cpus(len(gpus))
    return [Placement(gpus=g, cpus=cpus[i] if cpus else None) for i, g in enumerate(gpus)]
