"""Describe the machine a benchmark ran on (results files must say where numbers come from)."""

from __future__ import annotations

import os
import platform
import sys


def describe() -> str:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(ln.split()[1] for ln in f if ln.startswith("MemTotal")))
            mem = f", {kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    gpu = ""
    try:
        import torch

        if torch.cuda.is_available():
            gpu = f", GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}"
        else:
            gpu = f", no GPU, torch {torch.__version__}"
    except ImportError:
        pass
    return f"{cpu} x{os.cpu_count()}{mem}{gpu}, Python {sys.version.split()[0]}"


def report(result: dict, out: str = "") -> None:
    """A GPU probe's result: printed (the run's log brings it back whatever happens to the files)
    and, with ``out``, written there as JSON."""
    import json
    from pathlib import Path

    text = json.dumps(result, indent=1)
    print(text)
    if out:
        Path(out).write_text(text)
