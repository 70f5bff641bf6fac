"""What every rule works from: the profile, its step basis, the GPU's idle time per step, and
facts about the program (framework, data loader, optimizer, precision, device).

One :class:`Context` is made per evaluation and computes each shared figure once, on first use.
All figures come from SQL over the profile's views; nothing here loops over events in Python.

**Per-step figures.** Timings (the mean step a saving is a share of) come from ``stat_steps``,
the selected steps not slowed by detailed tracing. GPU work, ops and runtime calls exist only in
traced steps, so GPU-side figures are totals over the *GPU windows* (the selected steps that
launched GPU work, see :mod:`dlscope.analysis.step_idle`) divided by their number. A profile
without steps has one window per rank: the span of its activity; its "per step" figures are over
that whole window and savings are reported as a share of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..analysis.context import ProfileData
from ..analysis.gpu_work import has_steps
from ..analysis.kernel_names import kernel_names
from ..analysis.step_idle import step_idle, windows_sql
from .hardware import Device, device_of

WINDOWS = "adv_windows"  # temp table of the GPU windows, made once per context


@dataclass(frozen=True)
class Basis:
    """What a per-step figure is a share of."""

    has_steps: bool
    stat_steps: int          # steps the timings cover
    mean_step_ms: float | None
    windows: int             # GPU windows (steps with GPU data, or one per rank)
    window_ms: float         # mean GPU window length
    traced_excluded: bool    # timings left the traced steps out (sampled detail)

    @property
    def unit_ms(self) -> float:
        """The mean step, or the mean window without steps (or when no step was timed)."""
        return self.mean_step_ms if self.mean_step_ms else self.window_ms


@dataclass(frozen=True)
class Facts:
    """What the program uses, as far as the profile shows it."""

    framework: str                 # 'pytorch' or 'cuda' (generic wording)
    dataloader: str | None         # 'single' (num_workers=0), 'multi', or None (no DataLoader seen)
    optimizer: str | None          # e.g. 'AdamW', from Optimizer.step#AdamW.step
    compiled: bool                 # torch.compile / Triton kernels seen
    cuda_graphs: bool              # graph launches seen
    low_precision_math: bool       # some matrix math already runs in 16 bits
    device: Device | None
    foreign_runtime: bool = False  # runtime calls recorded, none of them CUDA or HIP (another accelerator)

    @property
    def torch(self) -> bool:
        return self.framework == "pytorch"


class Context:
    """Shared, lazily computed inputs of the rules for one profile."""

    def __init__(self, data: ProfileData) -> None:
        self.data = data

    # ---- steps and windows ------------------------------------------------------------------
    @cached_property
    def windows_table(self) -> str:
        """Name of a temp table (rank, step, start_ns, end_ns) of the GPU windows."""
        self.data.con.execute(f"CREATE OR REPLACE TEMP TABLE {WINDOWS} AS {windows_sql(self.data)}")
        return WINDOWS

    @cached_property
    def basis(self) -> Basis:
        d = self.data
        steps = has_steps(d)
        n_stat, mean = d.con.execute(
            "SELECT count(*), avg(end_ns - start_ns) / 1e6 FROM stat_steps").fetchall()[0]
        n_win, win_ms = d.con.execute(
            f"SELECT count(*), avg(end_ns - start_ns) / 1e6 FROM {self.windows_table}").fetchall()[0]
        return Basis(steps, int(n_stat or 0), float(mean) if mean else None, int(n_win or 0),
                     float(win_ms or 0.0), bool(d.traced_excluded))

    def in_windows(self, alias: str) -> str:
        """SQL: JOIN keeping rows of ``alias`` (with rank and step) launched in a GPU window."""
        w = self.windows_table
        # the windows are steps, or (without steps) one per rank with a NULL step: an equi-join
        # either way (with "step IS NULL OR step = ..." DuckDB pairs every row with every
        # window of its rank, then filters: a third of a second per rule on 34k kernels)
        if has_steps(self.data):
            return f"JOIN {w} ON {w}.rank = {alias}.rank AND {w}.step = {alias}.step"
        return f"JOIN {w} ON {w}.rank = {alias}.rank"

    def per_window(self, total_ns: float | None) -> float:
        """ms per GPU window of a total over all windows."""
        n = self.basis.windows
        return (float(total_ns or 0) / 1e6 / n) if n else 0.0

    def pct(self, ms_per_step: float) -> float | None:
        unit = self.basis.unit_ms
        return 100.0 * ms_per_step / unit if unit else None

    @cached_property
    def idle(self) -> list[dict[str, Any]]:
        """:func:`dlscope.analysis.step_idle.step_idle`, one dict per window."""
        return step_idle(self.data).to_pylist()

    def idle_ms(self, column: str) -> float:
        """Mean over the windows of an idle/wait column (ms per step)."""
        return self.per_window(sum(r[column] or 0 for r in self.idle)) if self.idle else 0.0

    def idle_share(self, *columns: str) -> float:
        """Share (0..1) of the GPU windows' time in the given idle/wait columns."""
        total = sum(r["window_ns"] for r in self.idle)
        return sum(r[c] or 0 for r in self.idle for c in columns) / total if total else 0.0

    @cached_property
    def kernel_ms(self) -> float:
        """Kernel time launched per GPU window (summed durations, overlaps counted twice)."""
        if not self.data.has("kernels") or not self.basis.windows:
            return 0.0
        k = "k"
        return self.per_window(self.data.scalar(
            f"SELECT sum(k.end_ns - k.start_ns)::DOUBLE FROM kernels {k} {self.in_windows(k)}"))

    @cached_property
    def host_wait_ms(self) -> float:
        """Mean time per step the host was blocked on the GPU (syncs, pageable copies). The
        most a step can shrink when only GPU work gets faster: the host's own work stays."""
        return self.idle_ms("wait_ns")

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
        return wait, (f"but the step shrinks only by the {wait:.2f} ms per step the host waited for the GPU: the host's "
                      f"own {host:.1f} ms per step (traced, so slowed by the profiler) sets the pace after that")

    def judge_gpu_cut(self, gpu_saving_ms: float, floor_pct: float) -> tuple[float, str] | None:
        """None when cutting ``gpu_saving_ms`` of GPU time per step is under ``floor_pct`` % of
        the step (the cause is judged on the GPU time); else :meth:`gpu_saving_cap`'s step bound
        and its note (the saving reported, which may be smaller)."""
        p = self.pct(gpu_saving_ms)
        if p is None or p < floor_pct:
            return None
        return self.gpu_saving_cap(gpu_saving_ms)

    # ---- facts about the program ----------------------------------------------------------
    @cached_property
    def facts(self) -> Facts:
        d = self.data
        # in order: with several optimizers, the same one is named every run
        names = [r[0] for r in d.con.execute(
            "SELECT DISTINCT name FROM phases WHERE name LIKE '%DataLoader%' OR name LIKE 'Optimizer.step#%' "
            "ORDER BY name").fetchall()] if d.has("phases") else []
        # PyTorch's signs: its ops, its own annotations (DataLoader, optimizer), ATen's kernels
        torch_ops = d.has("ops") and bool(d.scalar("SELECT count(*) FROM (SELECT 1 FROM ops WHERE name LIKE 'aten::%' LIMIT 1)"))
        aten = d.has("kernels") and bool(d.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM kernels WHERE name LIKE '%at::native::%' LIMIT 1)"))
        framework = "pytorch" if ("torch" in d.meta.frameworks or torch_ops or names or aten) else "cuda"
        loader = None
        if any("_MultiProcessingDataLoaderIter" in n for n in names):
            loader = "multi"
        elif any("_SingleProcessDataLoaderIter" in n for n in names):
            loader = "single"
        opt = next((m.group(1) for n in names if (m := re.match(r"Optimizer\.step#(\w+)\.step", n))), None)
        compiled = d.has("kernels") and bool(d.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM kernels WHERE name LIKE 'triton%' LIMIT 1)"))
        if not compiled and d.has("ops"):
            compiled = bool(d.scalar("SELECT count(*) FROM (SELECT 1 FROM ops WHERE name LIKE 'CompiledFunction%' "
                                     "OR name LIKE 'Torch-Compiled Region%' LIMIT 1)"))
        graphs = d.has("api") and bool(d.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM api WHERE lower(name) LIKE '%graphlaunch%' LIMIT 1)"))
        low = d.has("kernels") and bool(d.scalar(
            f"SELECT count(*) FROM (SELECT 1 FROM {kernel_names(d)} WHERE precision = 'low' LIMIT 1)"))
        foreign = d.has("api") and not d.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM api WHERE regexp_matches(lower(name), '^(cuda|cu|hip|hsa)') LIMIT 1)")
        return Facts(framework, loader, opt, compiled, graphs, low, device_of(d.meta.devices), bool(foreign))
