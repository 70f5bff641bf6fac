"""Injected by `dlscope profile` (first on PYTHONPATH) to start recording in every Python process
of the profiled command. It then hands over to any sitecustomize the environment already had."""

import os
import sys


def _dlscope_start() -> None:
    cfg = os.environ.get("DLSCOPE_SESSION")
    # launchers and multiprocessing's spawned children are sorted out by capture.distributed
    if not cfg:
        return
    try:
        from dlscope.capture import child
    except ImportError:
        extra = os.environ.get("DLSCOPE_PYTHONPATH")
        if not extra:
            raise
        sys.path.append(extra)
        from dlscope.capture import child
    child.start_from_env(cfg)


try:
    _dlscope_start()
except Exception as _e:  # never stop the program because profiling could not start
    sys.stderr.write(f"dlscope: not profiling process {os.getpid()}: {_e}\n")


def _chain_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mine = sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_chain_sitecustomize()
