"""Capture: collectors that record a running program into a profile's spool.

COLLECTORS is the one registry: a new collector is a module with a Collector subclass plus one
line here. The application layer is not a collector; it is the session itself.

The registry is built on first use (``from dlscope.capture import COLLECTORS``), so that the
command line's analysis commands, which import small parts of this package (``schedule``), start
without loading every collector.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Collector


def _collectors() -> list[type[Collector]]:
    from .cupti import CuptiCollector
    from .fix_injector import FixInjector
    from .jax_layer import JaxCollector
    from .live_status import LiveStatus
    from .nvml import NvmlCollector
    from .nvtx_emit import NvtxEmitter
    from .tf_layer import TensorflowCollector
    from .torch import TorchCollector
    from .torch_hooks import TorchPhaseHooks

    return [
        TorchPhaseHooks,  # phases of every step (before TorchCollector: its optimizer hook ends the step)
        TorchCollector,
        FixInjector,  # dlscope try: the fixes it applies, the run's end, the losses
        JaxCollector,  # JAX ops and kernels through jax.profiler
        TensorflowCollector,  # TensorFlow ops and kernels through tf.profiler.experimental
        NvmlCollector,  # hardware counters (host scope: the dlscope parent, or a helper process)
        CuptiCollector,  # CUDA activity for programs not using PyTorch
        NvtxEmitter,  # phases and steps as NVTX ranges, when asked
        LiveStatus,  # the live line of dlscope profile: step, step times, phase (when shown)
    ]


def __getattr__(name: str) -> Any:
    if name == "COLLECTORS":
        value: Any = _collectors()
    elif name == "Collector":
        from .base import Collector as value
    else:
        raise AttributeError(f"module 'dlscope.capture' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["COLLECTORS", "Collector"]
