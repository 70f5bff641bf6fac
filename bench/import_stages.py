"""Where a Kineto import's time goes on this machine, by DuckDB thread count and memory limit.

Each setting runs in a fresh process: the import's own stage timings (``meta.json``), its peak
RSS and its slowest queries. Settings are ``THREADS:MEMORY`` (``auto``: dlscope's default memory
for that many threads). Also prints a pure-Python loop's time, to compare machines' cores.

    python bench/import_stages.py TRACE [8:auto 8:2GB 4:auto 2:auto]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time


def child(trace: str, threads: int, memory: str) -> None:
    if memory != "auto":
        os.environ["DLSCOPE_BUILD_MEMORY"] = memory
    from dlscope.store import db

    log: list[tuple[float, str]] = []
    connect = db.connect

    class Timed:
        """The connection, with each execute timed."""

        def __init__(self, con) -> None:  # noqa: ANN001
            self._con = con

        def execute(self, sql, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN201
            t = time.perf_counter()
            r = self._con.execute(sql, *a, **k)
            log.append((time.perf_counter() - t, str(sql)))
            return r

        def __getattr__(self, name: str):  # noqa: ANN204
            return getattr(self._con, name)

    db.connect = lambda n=None, memory_limit=None: Timed(connect(n or threads, memory_limit))
    db.default_threads = lambda: threads
    t0 = time.perf_counter()
    from dlscope.importers.run import import_files

    out = import_files([trace], "/tmp/import_stages.dlscope", force=True)
    secs = time.perf_counter() - t0
    stages = json.loads((out / "meta.json").read_text())["timings_s"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"threads={threads} memory={memory}: import {secs:.2f} s, peak RSS {rss} MB, stages {stages}")
    for d, q in sorted(log, reverse=True)[:6]:
        print(f"   {d:.3f} {' '.join(q.split())[:110]}")


def main() -> int:
    if len(sys.argv) > 3 and sys.argv[2] == "--child":
        child(sys.argv[1], int(sys.argv[3]), sys.argv[4])
        return 0
    trace = sys.argv[1]
    settings = sys.argv[2:] or ["8:auto", "8:2GB", "4:auto", "2:auto"]
    t = time.perf_counter()
    sum(i * i for i in range(5_000_000))
    print(f"pure-Python loop: {time.perf_counter() - t:.2f} s")
    for s in settings:
        threads, memory = s.split(":")
        subprocess.run([sys.executable, __file__, trace, "--child", threads, memory], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
