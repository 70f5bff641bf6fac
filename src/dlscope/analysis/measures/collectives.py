"""Small collectives: per rank, the collectives under :data:`~dlscope.vocabulary.collectives.SMALL_BYTES`
(1 MiB) in the selected steps, where NCCL's fixed latency dominates their cost, and the kinds of
them (operation, count, mean size and duration).

A collective's size is its message size from the trace (:func:`dlscope.vocabulary.collectives.size_bytes_sql`:
input or output bytes as the operation moves them); collectives without a step are left out of
the per-rank figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...vocabulary.collectives import SMALL_BYTES, size_bytes_sql
from ..core.context import ProfileData
from ..core.gpu_work import selected_sql
from . import measured

_SIZE = size_bytes_sql("name", "in_bytes", "out_bytes", "group_size")


@dataclass(frozen=True)
class RankSmallCollectives:
    """One rank's small collectives in the selected steps."""

    rank: int
    steps: int  # steps with a small collective
    count: int
    total_ns: int
    longest_ns: int  # the longest one
    total_bytes: int
    comm_steps: int  # steps with any collective


@dataclass(frozen=True)
class SmallCollectiveKind:
    """One operation among a rank's small collectives."""

    operation: str
    count: int
    mean_bytes: float
    mean_us: float


@measured
def collective_sizes_known(data: ProfileData) -> bool:
    """Whether the trace gives message sizes (Gloo's come with input shapes only)."""
    return bool(data.scalar("SELECT count(*) FROM comms WHERE in_bytes IS NOT NULL OR out_bytes IS NOT NULL"))


@measured
def small_collectives(data: ProfileData) -> tuple[RankSmallCollectives, ...]:
    """Per rank with small collectives in steps, by rank."""
    rows = data.rows(f"""
        WITH c AS (SELECT *, {_SIZE} AS size_bytes FROM ({selected_sql(data, "comms", launched=True)})
                   WHERE step IS NOT NULL),
             small AS (SELECT * FROM c WHERE size_bytes < {SMALL_BYTES})
        SELECT rank, count(DISTINCT step) AS steps, count(*) AS n, sum(end_ns - start_ns)::BIGINT AS ns,
               max(end_ns - start_ns) AS longest_ns, sum(size_bytes)::BIGINT AS bytes,
               (SELECT count(DISTINCT step) FROM c c2 WHERE c2.rank = small.rank) AS comm_steps
        FROM small GROUP BY rank ORDER BY rank""")
    return tuple(
        RankSmallCollectives(r["rank"], r["steps"], r["n"], r["ns"], r["longest_ns"], r["bytes"], r["comm_steps"])
        for r in rows
    )


@measured
def small_collective_kinds(data: ProfileData, rank: int, top: int) -> tuple[SmallCollectiveKind, ...]:
    """The ``top`` most frequent operations among ``rank``'s small collectives in the selection
    (with or without a step)."""
    rows = data.rows(f"""SELECT name AS operation, count(*) AS count, avg({_SIZE}) AS mean_bytes,
                                avg(end_ns - start_ns) / 1e3 AS mean_us
                         FROM ({selected_sql(data, "comms", launched=True)})
                         WHERE {_SIZE} < {SMALL_BYTES} AND rank = {int(rank)}
                         GROUP BY 1 ORDER BY count DESC LIMIT {int(top)}""")
    return tuple(SmallCollectiveKind(**r) for r in rows)
