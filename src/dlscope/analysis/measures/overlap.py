"""Exposed communication: per rank, the communication time no compute ran alongside, with the
part of it spent waiting for other ranks.

From the overlap report (:mod:`dlscope.analysis.reports.overlap`, HTA's comm/comp overlap): per rank, the
merged communication time, the part covered by compute, and each rank's waits for the others at
matched collectives (:mod:`dlscope.analysis.core.comm_wait`), which are taken out of the exposed time:
a rank waiting for a late peer is "communicating" without moving data. On the GPU's streams where
the kernels show communication; else the host's collective calls against its top-level ops (Gloo).
Per step: per GPU window (GPU basis) or per traced step (host basis).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.comm_wait import step_wait_sql
from ..core.context import ProfileData
from ..reports.overlap import overlap_sql, work_sql
from . import measured
from .basis import basis as step_basis


@dataclass(frozen=True)
class RankCommExposure:
    """One rank's communication per step."""

    rank: int
    comm_ms: float
    exposed_ms: float  # not covered by compute
    wait_ms: float  # waits for the other ranks
    exposed_transfer_ms: float  # exposed, waits left out
    overlap_pct: float | None  # share of comm_ms covered by compute


@dataclass(frozen=True)
class ExposedComm:
    basis: str  # 'gpu' (the GPU's streams) or 'host' (the host's collective calls)
    ranks: tuple[RankCommExposure, ...]


@measured
def _comm_work(data: ProfileData) -> tuple[str, str] | None:
    """:func:`dlscope.analysis.reports.overlap.work_sql`, asked once (it counts the communication)."""
    return work_sql(data)


def communication_basis(data: ProfileData) -> str | None:
    """'gpu' or 'host': where the selected steps' communication is seen; None without any."""
    work = _comm_work(data)
    return work[1] if work is not None else None


@measured
def exposed_comm(data: ProfileData) -> ExposedComm | None:
    """Per rank, the communication not covered by compute; None without communication."""
    got = _comm_work(data)
    if got is None:
        return None
    work, basis = got
    steps = step_basis(data).windows if basis == "gpu" else int(data.scalar("SELECT count(*) FROM detail_steps") or 0)
    steps = max(int(steps or 0), 1)
    rows = data.rows(f"""
        WITH o AS ({overlap_sql(work)}),
             w AS (SELECT rank, sum(wait_ns)::BIGINT AS wait_ns FROM ({step_wait_sql(data)}) GROUP BY rank)
        SELECT o.rank, o.comm_ns / 1e6 / {steps} AS comm_ms, (o.comm_ns - o.overlap_ns) / 1e6 / {steps} AS exposed_ms,
               coalesce(w.wait_ns, 0) / 1e6 / {steps} AS wait_ms,
               greatest(o.comm_ns - o.overlap_ns - coalesce(w.wait_ns, 0), 0) / 1e6 / {steps} AS exposed_transfer_ms,
               100.0 * o.overlap_ns / nullif(o.comm_ns, 0) AS overlap_pct
        FROM o LEFT JOIN w USING (rank) ORDER BY rank""")
    return ExposedComm(basis, tuple(RankCommExposure(**r) for r in rows))
