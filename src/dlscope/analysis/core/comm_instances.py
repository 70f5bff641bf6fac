"""Each collective matched across the ranks that ran it, and its own time without the waits.

The k-th collective of a kind (allreduce, allgather, ...) in a process group is the same operation
on every rank of the group: NCCL and Gloo keep the order in which a communicator's operations are
issued. A collective's recorded time on a rank includes waiting for the ranks that arrive later;
the rank that arrived last waited for nobody, so the shortest of its durations across the ranks is
the collective's own time, its *transfer*. It sits at the end of every rank's record (a collective
ends together everywhere), so ``[end - transfer, end]`` on each rank is the transfer and what
precedes it the wait. Only operations recorded on every rank of their group are matched.
"""

from __future__ import annotations

from .context import ProfileData
from .gpu_work import selected_sql

# each operation's ordinal in its group and kind, over the whole profile, so that a step selection
# keeps the same ordinals on every rank
NUMBERED = (
    "(SELECT *, row_number() OVER (PARTITION BY rank, group_name, backend, name ORDER BY start_ns) AS nth_ FROM comms)"
)


def selected_numbered_sql(data: ProfileData) -> str:
    """SQL: the comms rows of the selected steps, each with its ordinal ``nth_``."""
    return selected_sql(data, NUMBERED, launched=True)


def transfer_sql(data: ProfileData, rows: str | None = None) -> str:
    """SQL: per rank and matched operation of ``rows`` (default: the selected comms rows, numbered),
    its columns with ``transfer_ns`` (the shortest duration across the group's ranks)."""
    rows = rows or selected_numbered_sql(data)
    return f"""
        WITH r_ AS ({rows}),
             last_in_ AS (SELECT group_name, backend, name, nth_, min(end_ns - start_ns) AS transfer_ns
                          FROM r_ GROUP BY ALL HAVING count(DISTINCT rank) = any_value(group_size))
        SELECT r_.*, l_.transfer_ns FROM r_ JOIN last_in_ l_
          ON l_.name = r_.name AND l_.nth_ = r_.nth_ AND l_.backend IS NOT DISTINCT FROM r_.backend
         AND l_.group_name IS NOT DISTINCT FROM r_.group_name"""
