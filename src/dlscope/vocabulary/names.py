"""Names of dlscope's own things that cross seams: the advice rules' ids, the `dlscope try` fixes' and the
steps' sources.

str enums (:class:`Name`): JSON and text show the value ("amp_not_enabled"), and a member compares
and hashes as that string, so profiles, JSON and the user's ``--fixes bf16`` keep their form while the
code names them as members that a checker sees (a fix's ``rules`` are ``RuleId``s, not strings that
could name a rule that is gone).
"""

from __future__ import annotations

import enum


class Name(str, enum.Enum):
    """A name whose text is its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class RuleId(Name):
    """An advice rule (one module of ``dlscope.advice`` each, registered in ``advice.RULES``)."""

    GPU_IDLE = "gpu_idle"
    INPUT_BOUND = "input_bound"
    LAUNCH_BOUND = "launch_bound"
    PAGEABLE_MEMCPY = "pageable_memcpy"
    H2D_NOT_OVERLAPPED = "h2d_not_overlapped"
    SYNC_IN_STEP = "sync_in_step"
    NO_TENSOR_CORES = "no_tensor_cores"
    AMP_NOT_ENABLED = "amp_not_enabled"
    LAYOUT_TRANSPOSES = "layout_transposes"
    KERNEL_BOUND = "kernel_bound"
    FUSION_CANDIDATES = "fusion_candidates"
    UNFUSED_OPTIMIZER = "unfused_optimizer"
    MEMORY_UNDERUSED = "memory_underused"
    MEMORY_NEAR_LIMIT = "memory_near_limit"
    HIGH_STEP_VARIANCE = "high_step_variance"
    STRAGGLER = "straggler"
    COMM_EXPOSED = "comm_exposed"
    FSDP_EXPOSED_GATHERS = "fsdp_exposed_gathers"
    SMALL_COLLECTIVES = "small_collectives"
    THROTTLING = "throttling"
    BELOW_ROOFLINE = "below_roofline"


class FixName(Name):
    """A fix ``dlscope try`` injects (one module of ``dlscope.capture.fixes`` each, registered in ``FIXES``)."""

    BF16 = "bf16"
    TF32 = "tf32"
    WORKERS = "workers"
    PINNED = "pinned"
    BATCH = "batch"
    FUSED_OPT = "fused_opt"
    CHANNELS_LAST = "channels_last"
    CUDNN_BENCHMARK = "cudnn_benchmark"
    COMPILE = "compile"
    COMPILE_GRAPHS = "compile_graphs"
    DEFER_SYNC = "defer_sync"


class StepSource(Name):
    """Where a profile's steps came from (``steps.source``; store/schema.py describes each)."""

    DLSCOPE = "dlscope"  # the program's dlscope.step() / prof.step()
    PROFILER_STEP = "profiler_step"  # ProfilerStep#N, JAX/TF step annotations
    OPTIMIZER = "optimizer"  # optimizer steps of an unmodified PyTorch script
    KEY_NODE = "key_node"  # --key-node's iterations
    SESSION_RUN = "session_run"  # a TF1 program's Session.run calls
    JIT_EXECUTABLE = "jit_executable"  # the runs of a JAX program's repeated jit executable (no annotations)
