"""Capture: collectors that record a running program into a profile's spool.

COLLECTORS is the one registry: a new collector is a module with a Collector subclass plus one
line here. The application layer is not a collector; it is the session itself.
"""

from __future__ import annotations

from .base import Collector
from .cupti import CuptiCollector
from .jax_layer import JaxCollector
from .nvml import NvmlCollector
from .nvtx_emit import NvtxEmitter
from .tf_layer import TensorflowCollector
from .torch import TorchCollector

COLLECTORS: list[type[Collector]] = [
    TorchCollector,
    JaxCollector,  # JAX ops and kernels through jax.profiler
    TensorflowCollector,  # TensorFlow ops and kernels through tf.profiler.experimental
    NvmlCollector,  # hardware counters (host scope: the dlscope parent, or a helper process)
    CuptiCollector,  # CUDA activity for programs not using PyTorch
    NvtxEmitter,  # phases and steps as NVTX ranges, when asked
]

__all__ = ["COLLECTORS", "Collector"]
