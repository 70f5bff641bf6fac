"""The host's synchronizing calls in the GPU windows, by where they were made: each (call, outermost
op, innermost op, phase) of the rank's main process, with its calls and wait per step and the steps
it was seen in (largest wait first). The calls are :data:`..core.host_state.SYNC_API_PATTERNS`."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.call_place import with_place_sql
from ..core.context import ProfileData
from ..core.host_state import SYNC_API_RE, main_pid_sql
from . import measured
from .basis import basis, in_gpu_windows


@dataclass(frozen=True)
class SyncSite:
    """A synchronizing call at one place in the program (fields in the evidence's column order)."""

    call: str
    op: str | None  # the outermost op around the call
    inner_op: str | None  # the innermost op (linked by external id)
    phase: str | None
    calls_per_step: float
    wait_ms_per_step: float
    steps: list[int]


@measured
def sync_sites(data: ProfileData) -> tuple[SyncSite, ...]:
    """The main process's synchronizing calls in the GPU windows, per place, largest wait first."""
    windows = basis(data).windows
    calls = f"""SELECT a.rank, a.step, a.pid, a.tid, a.start_ns, a.external_id, a.name AS call,
                       a.end_ns - a.start_ns AS wait_ns
                FROM api a LEFT JOIN ({main_pid_sql(data)}) m USING (rank) {in_gpu_windows(data, "a")}
                WHERE (m.pid IS NULL OR a.pid IS NULL OR a.pid = m.pid)
                  AND regexp_matches(lower(a.name), '{SYNC_API_RE}')"""
    rows = data.rows(f"""
        SELECT call, top_op AS op, op AS inner_op, phase,
               count(*)::DOUBLE / {windows} AS calls_per_step,
               sum(wait_ns)::DOUBLE / 1e6 / {windows} AS wait_ms_per_step,
               list(DISTINCT step ORDER BY step) AS steps
        FROM ({with_place_sql(data, calls)}) GROUP BY ALL ORDER BY wait_ms_per_step DESC""")
    return tuple(
        SyncSite(
            r["call"], r["op"], r["inner_op"], r["phase"], r["calls_per_step"], r["wait_ms_per_step"], r["steps"] or []
        )
        for r in rows
    )
