"""The step basis every per-step figure is a share of, and the GPU's idle time per GPU window.

Timings (the mean step a saving is a share of) come from ``stat_steps``, the selected steps not
slowed by detailed tracing. GPU work, ops and runtime calls exist only in traced steps, so GPU-side
figures are totals over the *GPU windows* (the selected steps that launched GPU work, see
:mod:`dlscope.analysis.core.step_idle`) divided by their number. A profile without steps has one window
per rank: the span of its activity; its "per step" figures are over that whole window.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.gpu_work import has_steps
from ..core.step_idle import step_idle, windows_sql
from . import measured

WINDOWS = "adv_windows"  # temp table of the GPU windows, made once per opened profile


@dataclass(frozen=True)
class Basis:
    """What a per-step figure is a share of."""

    has_steps: bool
    stat_steps: int  # steps the timings cover
    mean_step_ms: float | None
    windows: int  # GPU windows (steps with GPU data, or one per rank)
    window_ms: float  # mean GPU window length
    traced_excluded: bool  # timings left the traced steps out (sampled detail)

    @property
    def unit_ms(self) -> float:
        """The mean step, or the mean window without steps (or when no step was timed)."""
        return self.mean_step_ms if self.mean_step_ms else self.window_ms

    def per_window(self, total_ns: float | None) -> float:
        """ms per GPU window of a total over all windows."""
        return (float(total_ns or 0) / 1e6 / self.windows) if self.windows else 0.0

    def pct(self, ms_per_step: float) -> float | None:
        """``ms_per_step`` as a share (%) of the step (or window)."""
        unit = self.unit_ms
        return 100.0 * ms_per_step / unit if unit else None


@dataclass(frozen=True)
class WindowIdle:
    """One GPU window's time (ns) by what the GPU and the host were doing (see :mod:`..step_idle`)."""

    rank: int
    step: int | None
    start_ns: int
    end_ns: int
    window_ns: int
    busy_ns: int
    queued_ns: int
    input_ns: int
    sync_ns: int
    launch_ns: int
    other_ns: int
    wait_ns: int
    sync_wait_ns: int
    pageable_wait_ns: int


def gpu_windows_table(data: ProfileData) -> str:
    """Name of a temp table (rank, step, start_ns, end_ns) of the GPU windows."""
    return data.shared_table(WINDOWS, lambda: windows_sql(data))


def in_gpu_windows(data: ProfileData, alias: str) -> str:
    """SQL: JOIN keeping rows of ``alias`` (with rank and step) launched in a GPU window."""
    w = gpu_windows_table(data)
    # the windows are steps, or (without steps) one per rank with a NULL step: an equi-join
    # either way (with "step IS NULL OR step = ..." DuckDB pairs every row with every
    # window of its rank, then filters: a third of a second per rule on 34k kernels)
    if has_steps(data):
        return f"JOIN {w} ON {w}.rank = {alias}.rank AND {w}.step = {alias}.step"
    return f"JOIN {w} ON {w}.rank = {alias}.rank"


@measured
def basis(data: ProfileData) -> Basis:
    """The step basis of the profile's selection."""
    n_stat, mean = data.con.execute("SELECT count(*), avg(end_ns - start_ns) / 1e6 FROM stat_steps").fetchall()[0]
    n_win, win_ms = data.con.execute(
        f"SELECT count(*), avg(end_ns - start_ns) / 1e6 FROM {gpu_windows_table(data)}"
    ).fetchall()[0]
    return Basis(
        has_steps(data),
        int(n_stat or 0),
        float(mean) if mean else None,
        int(n_win or 0),
        float(win_ms or 0.0),
        bool(data.traced_excluded),
    )


@measured
def window_idle(data: ProfileData) -> tuple[WindowIdle, ...]:
    """:func:`dlscope.analysis.core.step_idle.step_idle`, one record per GPU window."""
    return tuple(WindowIdle(**r) for r in step_idle(data).to_pylist())


@dataclass(frozen=True)
class GpuTimes:
    """GPU-side totals per GPU window (ms per step)."""

    kernel_ms: float  # kernel time launched (summed durations, overlaps counted twice)
    host_wait_ms: float  # the host blocked on the GPU (syncs, pageable copies)


def idle_ms(data: ProfileData, column: str) -> float:
    """Mean over the GPU windows of an idle/wait column of :class:`WindowIdle` (ms per step)."""
    rows = window_idle(data)
    return basis(data).per_window(sum(getattr(r, column) or 0 for r in rows)) if rows else 0.0


def idle_share(data: ProfileData, *columns: str) -> float:
    """Share (0..1) of the GPU windows' time in the given columns of :class:`WindowIdle`."""
    rows = window_idle(data)
    total = sum(r.window_ns for r in rows)
    return sum(getattr(r, c) or 0 for r in rows for c in columns) / total if total else 0.0


@measured
def gpu_times(data: ProfileData) -> GpuTimes:
    """Kernel time and the host's wait for the GPU, per GPU window."""
    b = basis(data)
    kernel = 0.0
    if data.has("kernels") and b.windows:
        kernel = b.per_window(
            data.scalar(f"SELECT sum(k.end_ns - k.start_ns)::DOUBLE FROM kernels k {in_gpu_windows(data, 'k')}")
        )
    return GpuTimes(kernel, idle_ms(data, "wait_ns"))
