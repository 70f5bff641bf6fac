"""What the host was doing in a step, in the classes the replay and its calibration share.

The classes are read from phase names (dlscope's hooks name them ``dataloader``, ``forward``,
``backward``, ``optimizer``; a user's own phases are matched by the same patterns). Where phases
nest, the inner class wins in this order: input, model, optimizer, other. Model before optimizer,
because PyTorch Lightning runs forward and backward inside ``optimizer.step(closure)``: work
nested in the optimizer's phase is not the optimizer's.
"""

from __future__ import annotations

import enum

from .host_state import DATA_LOADING_RE


class HostClass(enum.IntEnum):
    """A host-work class; the value is the index used in the replay's arrays."""

    INPUT = 0
    OPTIMIZER = 1
    MODEL = 2
    OTHER = 3

    @property
    def label(self) -> str:
        return self.name.lower()


class Blocking(enum.IntEnum):
    """Whether a runtime call holds the host until the GPU is done, and why."""

    NONE = 0
    SYNC = 1  # a synchronize (device, stream, event, context)
    PAGEABLE_H2D = 2  # a host-to-device copy from pageable memory
    PAGEABLE_D2H = 3  # a device-to-host copy to pageable memory (.item(), .cpu())


OPTIMIZER_RE = r"^optimizer$|^optimizer\.step#|^optimizer[_ .-]?step$"
MODEL_RE = r"^(forward|backward)$|^autograd::engine::evaluate_function|^(fwd|bwd)$"
# the host's own wait for the GPU, timed by dlscope's hooks (capture.torch_hooks)
SYNC_PHASE_RE = r"^sync$"

CLASS_RE: dict[HostClass, str] = {
    HostClass.INPUT: DATA_LOADING_RE,
    HostClass.MODEL: MODEL_RE,
    HostClass.OPTIMIZER: OPTIMIZER_RE,
}
# which class a moment belongs to when phases of several classes cover it (inner wins)
PRECEDENCE: tuple[HostClass, ...] = (HostClass.INPUT, HostClass.MODEL, HostClass.OPTIMIZER)
