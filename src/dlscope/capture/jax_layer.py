"""The JAX layer: :class:`~.xprof.XprofCollector` driving ``jax.profiler``.

JAX registers its GPU tracer when its backends start, and ``start_trace`` starts them: starting
at ``import jax`` would fix the platform before the program configures it. So the profiler starts
right after JAX first initializes its backends (the first array operation or device query), by
wrapping ``jax._src.xla_bridge.backends``.
"""

from __future__ import annotations

import threading
from typing import Any

from .base import Settings
from .xprof import XprofCollector


class JaxCollector(XprofCollector):
    name = "jax"
    setting = "jax"
    framework = "jax"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._wrapped: tuple[Any, Any] | None = None

    def _arm(self) -> None:
        try:
            from jax._src import xla_bridge
        except ImportError:
            self._begin()  # a JAX without this module: start now
            return
        if getattr(xla_bridge, "_backends", None):  # already initialized
            self._begin()
            return
        original = xla_bridge.backends
        collector = self
        busy = threading.local()

        def backends(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if not getattr(busy, "on", False) and not collector.tracing and not collector.done:
                busy.on = True  # start_trace calls backends() again
                try:
                    collector._begin()
                finally:
                    busy.on = False
            return result

        backends.__wrapped__ = original  # type: ignore[attr-defined]  # a marker on the wrapping function
        xla_bridge.backends = backends
        self._wrapped = (xla_bridge, original)

    def _unarm(self) -> None:
        if self._wrapped is not None:
            module, original = self._wrapped
            if getattr(module.backends, "__wrapped__", None) is original:
                module.backends = original
            self._wrapped = None

    def _step_class(self) -> Any:
        import jax

        return jax.profiler.StepTraceAnnotation

    def _start_profiler(self, logdir: str) -> None:
        import jax

        opts = jax.profiler.ProfileOptions() if hasattr(jax.profiler, "ProfileOptions") else None
        if opts is not None:
            opts.python_tracer_level = 0
            jax.profiler.start_trace(logdir, profiler_options=opts)
        else:
            jax.profiler.start_trace(logdir)

    def _stop_profiler(self) -> None:
        import jax

        jax.profiler.stop_trace()

    def _annotate(self, name: str) -> None:
        import jax

        with jax.profiler.TraceAnnotation(name):
            pass
