"""What every rule works from: the profile, its step basis, the GPU's idle time per step, and
facts about the program (framework, data loader, optimizer, precision, device).

One :class:`Context` is made per evaluation. Every figure is a measurement of
:mod:`dlscope.analysis.measures` (computed once per opened profile); the context only hands them
to the rules, with the arithmetic of judging a GPU-side saving against the host's wait.
"""

from __future__ import annotations

from ..analysis.core.context import ProfileData
from ..analysis.measures import basis as basis_measure
from ..analysis.measures.basis import (
    Basis,
    WindowIdle,
    gpu_times,
    window_idle,
)
from ..analysis.measures.facts import Facts, facts

__all__ = ["Basis", "Context", "Facts"]


class Context:
    """Shared inputs of the rules for one profile."""

    def __init__(self, data: ProfileData) -> None:
        self.data = data

    # ---- steps and windows ------------------------------------------------------------------
    @property
    def basis(self) -> Basis:
        return basis_measure.basis(self.data)

    def per_window(self, total_ns: float | None) -> float:
        """ms per GPU window of a total over all windows."""
        return self.basis.per_window(total_ns)

    def pct(self, ms_per_step: float) -> float | None:
        return self.basis.pct(ms_per_step)

    @property
    def idle(self) -> tuple[WindowIdle, ...]:
        """:func:`dlscope.analysis.core.step_idle.step_idle`, one record per window."""
        return window_idle(self.data)

    def idle_ms(self, column: str) -> float:
        """Mean over the windows of an idle/wait column (ms per step)."""
        return basis_measure.idle_ms(self.data, column)

    def idle_share(self, *columns: str) -> float:
        """Share (0..1) of the GPU windows' time in the given idle/wait columns."""
        return basis_measure.idle_share(self.data, *columns)

    @property
    def kernel_ms(self) -> float:
        """Kernel time launched per GPU window (summed durations, overlaps counted twice)."""
        return gpu_times(self.data).kernel_ms

    @property
    def host_wait_ms(self) -> float:
        """Mean time per step the host was blocked on the GPU (syncs, pageable copies). The
        most a step can shrink when only GPU work gets faster: the host's own work stays."""
        return gpu_times(self.data).host_wait_ms

    def gpu_saving_cap(self, gpu_saving_ms: float) -> tuple[float, str]:
        """A step-time bound for a cut of ``gpu_saving_ms`` of GPU time per step, and why: the
        step shrinks by at most the time the host waited for the GPU, since the host's own work
        stays (with the profiler on, which slows the host: a leaner host leaves more to gain). A
        profile that records no runtime calls gets the GPU saving itself. Rules judge whether a
        cause is worth reporting on the GPU saving, and report this bound as the saving."""
        if not self.data.has("api") and not self.data.has("sync"):
            return gpu_saving_ms, "no runtime calls were recorded, so the host's waits are unknown"
        wait = self.host_wait_ms
        if wait >= gpu_saving_ms:
            return gpu_saving_ms, ""
        host = self.basis.window_ms - wait
        return (
            wait,
            (
                f"but the step shrinks only by the {wait:.2f} ms per step the host waited for the GPU: the host's "
                f"own {host:.1f} ms per step (traced, so slowed by the profiler) sets the pace after that"
            ),
        )

    def judge_gpu_cut(self, gpu_saving_ms: float, floor_pct: float) -> tuple[float, str] | None:
        """None when cutting ``gpu_saving_ms`` of GPU time per step is under ``floor_pct`` % of
        the step (the cause is judged on the GPU time); else :meth:`gpu_saving_cap`'s step bound
        and its note (the saving reported, which may be smaller)."""
        p = self.pct(gpu_saving_ms)
        if p is None or p < floor_pct:
            return None
        return self.gpu_saving_cap(gpu_saving_ms)

    # ---- facts about the program ----------------------------------------------------------
    @property
    def facts(self) -> Facts:
        return facts(self.data)
