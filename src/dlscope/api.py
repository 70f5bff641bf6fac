"""The Python entry point.

    import dlscope
    with dlscope.profile("run.dlscope", batch_size=64) as prof:
        for batch in data:
            with prof.phase("preprocess"): ...
            with prof.phase("run"): ...
            with prof.phase("postprocess"): ...
            prof.step()

The module-level :func:`phase`, :func:`step`, :func:`mark`, :func:`begin` and :func:`end` act on
the active profile and do (almost) nothing when there is none, so library code can be annotated
once and left annotated. Under ``dlscope profile -- python train.py`` a profile is already active
when the program starts; ``dlscope.profile(...)`` then joins it instead of starting another.
"""

from __future__ import annotations

from pathlib import Path

from .application.record import Profile, begin, current, end, mark, phase, recording, step, step_range
from .capture.base import Settings

__all__ = ["Profile", "begin", "current", "end", "mark", "phase", "profile", "step"]


def profile(
    path: str | Path = "run.dlscope",
    *,
    batch_size: int | None = None,
    steps: str | tuple[int | None, int | None] | None = None,
    warmup: int | None = None,
    mode: str = "default",
    detail_steps: int | None = None,
    torch: str = "auto",
    nvml: str = "auto",
    cupti: str = "auto",
    nvtx: bool = False,
    key_node: str | None = None,
) -> Profile:
    """Create a profile handle; use it as a context manager (or call start()/stop()).

    ``steps="A:B"`` records only steps A to B (inclusive); ``warmup=N`` flags the first N recorded
    steps as warm-up (default: 1 without a window, 0 with one). ``mode="full"`` adds input
    shapes and memory events to the PyTorch layer (Python stacks are not recorded). ``torch``,
    ``nvml`` and ``cupti`` are 'auto', 'on' or 'off'; ``nvtx=True`` also emits phases and steps as
    NVTX ranges.
    """
    from .errors import UsageError

    if mode not in ("default", "full"):
        raise UsageError(f"mode must be 'default' or 'full', got {mode!r}")
    window = step_range(steps) if isinstance(steps, str) else steps
    settings = Settings(
        batch_size=batch_size,
        steps=window,
        warmup=warmup,
        mode=mode,
        detail_steps=detail_steps,
        torch=torch,
        nvml=nvml,
        cupti=cupti,
        nvtx=nvtx,
        key_node=key_node,
    )
    return recording(path, settings)
