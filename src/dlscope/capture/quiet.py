"""Keep a library's own log lines out of the profiled program's stderr.

PyTorch's profiler (Kineto) prints lines such as ``USDT:... profiler_start`` from C++ when it
starts and stops. Profiling must not change the program's output, so around those two calls
file descriptor 2 goes to a temporary file, and afterwards every line that is not such a log
line is written back to stderr. Output of other threads during that window is delayed, not lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator

KINETO_NOISE = re.compile(rb"^(USDT:|INFO:|STAGE:).*(Profiler|profiler_|ActivityProfiler|kineto)", re.IGNORECASE)


@contextlib.contextmanager
def filtered_stderr(noise: re.Pattern[bytes] = KINETO_NOISE) -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = b"".join(line for line in tmp.read().splitlines(keepends=True) if not noise.match(line))
            if kept:
                os.write(2, kept)
