"""Host-device copies from or to pageable memory in the GPU windows: their copy time per window, and
per place in the program (direction, op, phase) their count, size, host-blocked and copy time per
step, bandwidth and steps (most host-blocked first)."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.call_place import with_place_sql
from ..core.context import ProfileData
from . import measured
from .basis import basis, gpu_windows_table, in_gpu_windows

PAGEABLE = "'pageable' IN (coalesce(c.src_kind, ''), coalesce(c.dst_kind, ''))"


@dataclass(frozen=True)
class PageableCopySite:
    """Pageable copies at one place (fields in the evidence's column order)."""

    direction: str | None
    op: str | None
    phase: str | None
    copies_per_step: float
    bytes_per_copy: float | None
    host_blocked_ms: float
    copy_ms: float
    gb_per_s: float | None
    steps: list[int]


@measured
def pageable_copy_ns(data: ProfileData) -> dict[tuple[int, int | None], float]:
    """(rank, step) -> the GPU time of its window's pageable copies, ns."""
    w = gpu_windows_table(data)
    return {
        (r["rank"], r["step"]): r["ns"]
        for r in data.rows(f"""
        SELECT c.rank, {w}.step, sum(c.end_ns - c.start_ns)::DOUBLE AS ns
        FROM memcpy c {in_gpu_windows(data, "c")}
        WHERE {PAGEABLE} GROUP BY ALL""")
    }


@measured
def pageable_copy_sites(data: ProfileData) -> tuple[PageableCopySite, ...]:
    """The pageable copies of the GPU windows, per place in the program, most host-blocked first."""
    windows = basis(data).windows
    copies = f"""SELECT c.rank, c.step, c.copy_kind, c.src_kind, c.dst_kind, c.bytes,
                        c.end_ns - c.start_ns AS gpu_ns, a.end_ns - a.start_ns AS api_ns,
                        a.pid, a.tid, a.start_ns, a.external_id, a.name AS call
                 FROM memcpy c JOIN api a ON a.rank = c.rank AND a.correlation_id = c.correlation_id
                 {in_gpu_windows(data, "c")}
                 WHERE {PAGEABLE}"""
    rows = data.rows(f"""
        SELECT copy_kind AS direction, coalesce(top_op, op, call) AS op, phase,
               count(*)::DOUBLE / {windows} AS copies_per_step, avg(bytes) AS bytes_per_copy,
               sum(api_ns)::DOUBLE / 1e6 / {windows} AS host_blocked_ms,
               sum(gpu_ns)::DOUBLE / 1e6 / {windows} AS copy_ms,
               sum(bytes) / nullif(sum(gpu_ns), 0) AS gb_per_s,
               list(DISTINCT step ORDER BY step) AS steps
        FROM ({with_place_sql(data, copies)}) GROUP BY ALL ORDER BY host_blocked_ms DESC""")
    return tuple(PageableCopySite(**{**r, "steps": r["steps"] or []}) for r in rows)
