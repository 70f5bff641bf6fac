"""NVTX emission: dlscope's phases and steps also become NVTX ranges (``--nvtx`` / ``nvtx=True``),
so a user running Nsight Systems or Nsight Compute on a dlscope-annotated program sees them.

The default path must stay as fast as it is, so nothing here adds a branch to it: when asked, the
recorder is switched to a subclass of its Range class whose enter/exit also push/pop an NVTX
range (attributes built once per range, the nvtx package's fastest path). Steps are NVTX
start/end ranges (not push/pop) because a step boundary does not nest with the thread's phases.
Ranges are emitted for every phase and step, recorded or not (a step window only limits what
dlscope records). They go to NVTX's default domain, so ``nsys stats -r nvtx_sum`` and ncu's
``--nvtx-include "run/"`` find them by their plain names.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..errors import CollectorUnavailable
from .app import Range
from .base import Collector
from .schedule import Action

if TYPE_CHECKING:
    from .session import Session


def nvtx_range_class(base: type[Range], domain: Any) -> type[Range]:
    """A Range class that also pushes/pops an NVTX range on ``domain`` around ``base``'s timing."""

    class NvtxRange(base):  # type: ignore[valid-type,misc]  # the base class is chosen at run time
        __slots__ = ("_nvtx_attrs",)

        def __init__(self, name: str, name_id: int, tid: int, recording: bool) -> None:
            super().__init__(name, name_id, tid, recording)
            self._nvtx_attrs = domain.get_event_attributes(message=name)

        # NVTX encloses dlscope's own timing: push before the enter time, pop after the exit time.
        def __enter__(self, _push: Any = domain.push_range, _enter: Callable[[Range], Range] = base.__enter__) -> Range:
            _push(self._nvtx_attrs)
            return _enter(self)

        def __exit__(
            self, exc_type: Any, exc: Any, tb: Any, _pop: Any = domain.pop_range, _exit: Any = base.__exit__
        ) -> Literal[False]:
            _exit(self, exc_type, exc, tb)
            _pop()
            return False

    NvtxRange.__name__ = NvtxRange.__qualname__ = f"Nvtx{base.__name__}"
    return NvtxRange


class NvtxEmitter(Collector):
    """Not a source of data: it makes phases and steps visible to NVIDIA's tools."""

    name: ClassVar[str] = "nvtx"
    layers: ClassVar[tuple[str, ...]] = ()
    setting: ClassVar[str] = "nvtx"
    scope: ClassVar[str] = "process"

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self._domain: Any = None
        self._step_range: Any = None

    def wanted(self) -> bool:
        return bool(self.settings.nvtx)

    def start(self, session: Session) -> None:
        try:
            import nvtx
        except ImportError:
            reason = "the nvtx package is not installed (pip install nvtx); phases are recorded but not emitted as NVTX"
            sys.stderr.write(f"dlscope: --nvtx: {reason}\n")
            raise CollectorUnavailable(reason) from None
        self._domain = nvtx.get_domain()
        rec = session.recorder
        rec.use_range_class(nvtx_range_class(rec.range_class, self._domain))
        self._begin_step(session.recorder.step_count)

    def _begin_step(self, idx: int) -> None:
        attrs = self._domain.get_event_attributes(message=f"step {idx}")
        self._step_range = self._domain.start_range(attrs)

    def on_step(self, step: int, action: Action) -> None:
        if self._step_range is not None:
            self._domain.end_range(self._step_range)
        self._begin_step(step)

    def stop(self) -> None:
        if self._step_range is not None:
            self._domain.end_range(self._step_range)
            self._step_range = None

    def describe(self) -> dict[str, Any]:
        return {"domain": "default"}
