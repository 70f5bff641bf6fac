"""Finding libcupti before cupti-python needs it, and saying truly why CUPTI cannot be used.

cupti-python loads libcupti lazily through ``cuda.pathfinder``, which looks in the interpreter's
*site-packages* and in ``CUDA_HOME``/``CUDA_PATH``, but not in ``PYTHONPATH`` entries: a CUDA
installed from pip wheels into a ``--target`` folder (``nvidia-cuda-cupti``, pulled in by jax's
CUDA plugin or by cupti-python itself) is then not found, and the first CUPTI call fails. So
before that call dlscope looks in every ``sys.path`` entry and the toolkit folders for the
library and loads it globally; pathfinder then finds it already loaded.

And a failed ``from cupti import cupti`` is not always "not installed": cupti-python imports
``cuda.bindings`` at import time (missing when the wheel was installed with ``--no-deps``) and
its compiled modules refuse a Python they were not built for. :func:`import_failure` tells
those apart, in one line.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

# newest first: cupti-python 13 wants libcupti.so.13, 12 wants .12 (the order pathfinder uses)
SONAMES = ("libcupti.so.13", "libcupti.so.12")
# where the wheels put it, relative to a sys.path entry (nvidia-cuda-cupti 13 and 12)
WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_cupti/lib", "nvidia/cu12/lib")
# where a toolkit puts it, relative to CUDA_HOME / CUDA_PATH / /usr/local/cuda
TOOLKIT_DIRS = ("extras/CUPTI/lib64", "lib64", "lib", "targets/x86_64-linux/lib")
TOOLKIT_ROOTS = ("/usr/local/cuda",)


def candidates(
    paths: list[str] | None = None, env: dict[str, str] | None = None, roots: tuple[str, ...] = TOOLKIT_ROOTS
) -> list[Path]:
    """libcupti files that exist, in the order they are tried: the wheels on ``paths``
    (default ``sys.path``), then the toolkits named by the environment, then ``roots``."""
    paths = list(sys.path) if paths is None else paths
    env = dict(os.environ) if env is None else env
    dirs: list[Path] = [Path(p or ".") / d for p in paths for d in WHEEL_DIRS]
    tops = [env.get("CUDA_HOME"), env.get("CUDA_PATH"), *roots]
    dirs += [Path(r) / d for r in tops if r for d in TOOLKIT_DIRS]
    out: list[Path] = []
    for soname in SONAMES:
        for d in dirs:
            f = d / soname
            if f not in out and f.is_file():
                out.append(f)
    return out


def already_loaded() -> bool:
    """A libcupti is mapped in this process already (by a framework, or by us)."""
    for soname in SONAMES:
        try:
            ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False


def preload() -> str | None:
    """Load the first libcupti found by :func:`candidates` into the global namespace, unless one
    is loaded or the dynamic loader finds one by itself. Returns the path loaded, or None."""
    if already_loaded():
        return None
    for soname in SONAMES:
        try:
            ctypes.CDLL(soname, mode=os.RTLD_GLOBAL)  # on the loader's own path: nothing to do
            return None
        except OSError:
            continue
    for path in candidates():
        try:
            ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
            return str(path)
        except OSError:
            continue
    return None


def import_failure(e: BaseException) -> str:
    """One line saying why ``from cupti import cupti`` failed."""
    if isinstance(e, ModuleNotFoundError) and e.name == "cupti":
        return "cupti-python is not installed (pip install cupti-python)"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    if isinstance(e, ModuleNotFoundError) and e.name and e.name.startswith("cupti."):
        return (
            f"cupti-python is installed but its compiled module {e.name} does not load on Python {version} "
            "(a wheel built for another Python version?)"
        )
    if isinstance(e, ModuleNotFoundError) and e.name:
        return (
            f"cupti-python is installed but cannot be imported: it needs the module {e.name!r}, which is "
            "missing (install cupti-python with its dependencies: cuda-bindings, cuda-pathfinder, "
            "nvidia-cuda-cupti)"
        )
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"cupti-python could not be imported: {e.__class__.__name__}: {first}"[:300]
