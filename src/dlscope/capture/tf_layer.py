"""The TensorFlow layer: :class:`~.xprof.XprofCollector` driving ``tf.profiler.experimental``
(started when the program imports tensorflow; its GPU tracer is built in)."""

from __future__ import annotations

from typing import Any

from .xprof import XprofCollector


class TensorflowCollector(XprofCollector):
    name = "tensorflow"
    setting = "tensorflow"
    framework = "tensorflow"

    def _step_class(self) -> Any:
        import tensorflow as tf

        return tf.profiler.experimental.Trace  # a step when given step_num=

    def _start_profiler(self, logdir: str) -> None:
        import tensorflow as tf

        exp = tf.profiler.experimental
        try:
            opts = exp.ProfilerOptions(host_tracer_level=2, python_tracer_level=0, device_tracer_level=1)
            exp.start(logdir, options=opts)
        except TypeError:
            exp.start(logdir)

    def _stop_profiler(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()

    def _annotate(self, name: str) -> None:
        import tensorflow as tf

        with tf.profiler.experimental.Trace(name):
            pass
