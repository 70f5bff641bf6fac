"""The summary's headline (DLProf's): how well the selected steps used the GPU, in a few numbers.

Over the wall time of the selected steps that hold GPU data (all of a rank's activity when the
profile has no steps), every instant counts once, by precedence:

* ``kernels_pct``: a kernel ran (on any stream of the rank's GPUs);
* ``memory_pct``: no kernel, but a copy or set ran;
* ``data_loading_pct``: the GPU was idle while the host was in a data-loading phase;
* ``cpu_only_pct``: the GPU was idle while the host did other recorded work (ops, runtime calls,
  phases);
* ``other_pct``: the GPU was idle and no host activity was recorded.

They sum to 100. ``gpu_util_pct`` = kernels + memory: the GPU was busy. ``tensor_core_pct``:
tensor-core kernel time / all kernel time (kernels launched in the selected steps, summed
durations; :mod:`.tensor_cores` decides from names). Host states as in :mod:`.host_state`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from . import interval_arrays as ia
from .context import ProfileData
from .gpu_work import gpu_islands_sql, gpu_step_count, has_steps, selected_sql
from .host_state import EMPTY_INTERVALS, host_ctes
from .kernel_names import kernel_names

GPU_TABLES = ("kernels", "memcpy", "memset")


@dataclass
class Headline:
    wall_ms: float
    steps: int | None  # steps the wall time covers; None: the profile has no steps
    gpu_util_pct: float | None
    tensor_core_pct: float | None  # None: no kernels
    kernels_pct: float | None
    memory_pct: float | None
    data_loading_pct: float | None
    cpu_only_pct: float | None
    other_pct: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _windows_sql(data: ProfileData) -> str:
    if has_steps(data):
        return "SELECT rank, start_ns, end_ns FROM detail_steps"
    spans = " UNION ALL ".join(
        f"SELECT rank, start_ns, end_ns FROM {t}" for t in ("ops", "api", *GPU_TABLES) if data.has(t)
    )
    return f"SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM ({spans}) GROUP BY rank"


def headline(data: ProfileData) -> Headline | None:
    """The headline, or None when the profile has no GPU activity."""
    present = [t for t in GPU_TABLES if data.has(t)]
    if not present:
        return None
    kernels = "SELECT rank, start_ns, end_ns FROM kernels" if data.has("kernels") else EMPTY_INTERVALS
    ctes = host_ctes(data)

    def fetch(sql: str) -> ia.Intervals:
        return data.con.execute(f"WITH {ctes} SELECT rank, start_ns, end_ns FROM ({sql})").fetchnumpy()

    # cumulative unions by precedence (kernels, + copies and sets, + data loading, + other host
    # work); each one's coverage of the windows minus the previous one's is that category's time.
    # The unions and coverage in numpy (see interval_arrays), each layer from the previous one's islands
    win = ia.union(fetch(_windows_sql(data)))
    km = fetch(gpu_islands_sql(data))
    kmd = ia.union(ia.concat(km, fetch("SELECT * FROM h_input")))
    layers = {
        "k": ia.union(fetch(kernels)),
        "km": km,
        "kmd": kmd,
        "kmdb": ia.union(ia.concat(kmd, fetch("SELECT * FROM h_busy"))),
    }
    wall = int(np.sum(win["end_ns"] - win["start_ns"]))
    k, km_ns, kmd_ns, kmdb = (
        int(np.sum(ia.covered(win["rank"], win["start_ns"], win["end_ns"], isl))) for isl in layers.values()
    )
    tc = (
        data.rows(f"""SELECT coalesce(sum(k.end_ns - k.start_ns) FILTER (WHERE n.tensor_core), 0)::DOUBLE AS tc,
                              sum(k.end_ns - k.start_ns)::DOUBLE AS total
                       FROM ({selected_sql(data, "kernels", launched=True)}) k
                       JOIN {kernel_names(data)} n ON n.name_id = k.name_id""")[0]
        if data.has("kernels")
        else None
    )

    def pct(ns: int) -> float | None:
        return 100.0 * ns / wall if wall else None

    return Headline(
        wall_ms=wall / 1e6,
        steps=gpu_step_count(data),
        gpu_util_pct=pct(km_ns),
        tensor_core_pct=100.0 * tc["tc"] / tc["total"] if tc and tc["total"] else None,
        kernels_pct=pct(k),
        memory_pct=pct(km_ns - k),
        data_loading_pct=pct(kmd_ns - km_ns),
        cpu_only_pct=pct(kmdb - kmd_ns),
        other_pct=pct(wall - kmdb),
    )
