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

from .context import ProfileData
from .gpu_work import gpu_islands_sql, gpu_step_count, has_steps, selected_sql
from .host_state import EMPTY_INTERVALS, classes_union_sql, host_ctes
from .intervals import total_covered_sql, union_sql
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
    spans = " UNION ALL ".join(f"SELECT rank, start_ns, end_ns FROM {t}"
                               for t in ("ops", "api", *GPU_TABLES) if data.has(t))
    return f"SELECT rank, min(start_ns) AS start_ns, max(end_ns) AS end_ns FROM ({spans}) GROUP BY rank"


def headline(data: ProfileData) -> Headline | None:
    """The headline, or None when the profile has no GPU activity."""
    present = [t for t in GPU_TABLES if data.has(t)]
    if not present:
        return None
    kernels = "SELECT rank, start_ns, end_ns FROM kernels" if data.has("kernels") else EMPTY_INTERVALS
    # cumulative unions by precedence (kernels, + copies and sets, + data loading, + other host
    # work); each one's coverage of the windows minus the previous one's is that category's time
    layers = {
        "k": union_sql(kernels, "rank"),
        "km": "SELECT * FROM km_isl",
        "kmd": "SELECT * FROM kmd_isl",
        # the union of kmd's islands and the host's busy time: kmd's classes plus busy, from fewer rows
        "kmdb": union_sql("SELECT * FROM kmd_isl UNION ALL SELECT rank, start_ns, end_ns FROM h_busy", "rank"),
    }
    covered = ", ".join(
        f"(SELECT sum(covered_ns)::BIGINT FROM ({total_covered_sql('SELECT * FROM win', isl, ('rank',))})) AS {name}"
        for name, isl in layers.items())
    row = data.rows(f"""
        WITH {host_ctes(data)},
             win AS MATERIALIZED ({union_sql(_windows_sql(data), "rank")}),
             km_isl AS ({gpu_islands_sql(data)}),
             kmd_isl AS MATERIALIZED ({classes_union_sql(("input",), "SELECT rank, start_ns, end_ns FROM km_isl")})
        SELECT (SELECT sum(end_ns - start_ns)::BIGINT FROM win) AS wall, {covered}""")[0]
    wall = int(row["wall"] or 0)
    k, km, kmd, kmdb = (int(row[n] or 0) for n in layers)
    tc = data.rows(f"""SELECT coalesce(sum(k.end_ns - k.start_ns) FILTER (WHERE n.tensor_core), 0)::DOUBLE AS tc,
                              sum(k.end_ns - k.start_ns)::DOUBLE AS total
                       FROM ({selected_sql(data, 'kernels', launched=True)}) k
                       JOIN {kernel_names(data)} n ON n.name_id = k.name_id""")[0] if data.has("kernels") else None

    def pct(ns: int) -> float | None:
        return 100.0 * ns / wall if wall else None

    return Headline(
        wall_ms=wall / 1e6, steps=gpu_step_count(data), gpu_util_pct=pct(km),
        tensor_core_pct=100.0 * tc["tc"] / tc["total"] if tc and tc["total"] else None,
        kernels_pct=pct(k), memory_pct=pct(km - k), data_loading_pct=pct(kmd - km),
        cpu_only_pct=pct(kmdb - kmd), other_pct=pct(wall - kmdb),
    )
