"""Host-to-device copies in the GPU windows and how much of each ran alongside a compute kernel on
its GPU: per place in the program (op, phase, source memory, whether on the compute stream) their
count, size, copy time and time not overlapped per step, and the steps (least overlapped first)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.call_place import with_place_sql
from ..core.context import ProfileData
from ..core.gpu_work import gpu_work_sql
from ..core.intervals import covered_sql
from . import measured
from .basis import basis, in_gpu_windows


@dataclass(frozen=True)
class H2dCopySite:
    """Host-to-device copies at one place (fields in the evidence's column order)."""

    op: str | None
    phase: str | None
    src_kind: str
    on_compute_stream: bool | None  # on the stream that runs the most kernels
    copies_per_step: float
    bytes_per_copy: float | None
    copy_ms: float
    not_overlapped_ms: float
    steps: list[int]


@measured
def h2d_copy_sites(data: ProfileData) -> tuple[H2dCopySite, ...]:
    """The GPU windows' host-to-device copies per place, the least overlapped with compute first."""
    windows = basis(data).windows
    work = gpu_work_sql(data, selected=False)
    compute = "SELECT * FROM " + data.shared_islands(
        "compute_islands",
        lambda: f"SELECT rank, device, start_ns, end_ns FROM ({work}) WHERE category = 'compute'",
        ("rank", "device"),
    )
    copies = f"""SELECT c.rank, coalesce(c.device, -1) AS device, c.stream, c.step, c.start_ns, c.end_ns, c.bytes,
                        coalesce(c.src_kind, 'unknown') AS src_kind, c.correlation_id
                 FROM memcpy c {in_gpu_windows(data, "c")} WHERE c.copy_kind = 'HtoD'"""
    # one row per copy: its duration and overlap, and the call that issued it (start_ns: the call's)
    placed = f"""SELECT x.rank, x.stream, x.step, x.bytes, x.src_kind, x.end_ns - x.start_ns AS copy_ns,
                        x.covered_ns, a.pid, a.tid, coalesce(a.start_ns, x.start_ns) AS start_ns, a.external_id
                 FROM ({covered_sql(copies, compute, ("rank", "device"))}) x
                 LEFT JOIN api a ON a.rank = x.rank AND a.correlation_id = x.correlation_id"""
    main_stream = (
        "(SELECT arg_max(stream, n) FROM (SELECT stream, count(*) AS n FROM kernels GROUP BY stream))"
        if data.has("kernels")
        else "NULL"
    )
    rows = data.rows(f"""
        SELECT coalesce(top_op, op) AS op, phase, src_kind, stream = {main_stream} AS on_compute_stream,
               count(*)::DOUBLE / {windows} AS copies_per_step, avg(bytes) AS bytes_per_copy,
               sum(copy_ns)::DOUBLE / 1e6 / {windows} AS copy_ms,
               sum(copy_ns - covered_ns)::DOUBLE / 1e6 / {windows} AS not_overlapped_ms,
               list(DISTINCT step ORDER BY step) AS steps
        FROM ({with_place_sql(data, placed)})
        GROUP BY ALL ORDER BY not_overlapped_ms DESC""")
    return tuple(H2dCopySite(**{**r, "steps": r["steps"] or []}) for r in rows)
