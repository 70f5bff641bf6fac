"""Waiting for other ranks: collectives matched across ranks, and who arrived last.

A collective completes on no rank before the last rank has joined it, so the time from a rank's
arrival (the operation's start: the communication kernel's start on the GPU, or Gloo's worker
taking it up) to the last rank's arrival is time that rank spent waiting for the others. The
k-th operation of one kind in one process group is the same collective on every rank (that is
how collectives are defined: every member issues them in the same order), so occurrences are
matched by (operation, group, k). Only occurrences seen on every recorded rank count, and only
collectives: a point-to-point send or receive involves two ranks, not the group.

This needs the ranks on one clock: ranks of one host share it; hosts are aligned as described
in docs/distributed.md.
"""

from __future__ import annotations

from .context import ProfileData
from .gpu_work import selected_sql

# point-to-point operations pair two ranks, not all of them: the k-th on one rank is not the
# k-th on another, so they are left out of the matching
P2P = "'sendrecv', 'send', 'recv'"


def ranks_recorded(data: ProfileData) -> int:
    return int(data.scalar("SELECT count(DISTINCT rank) FROM comms") or 0)


def matched_sql(data: ProfileData) -> str:
    """SQL: every communication operation of the selected steps that every recording rank ran,
    with ``k`` (its occurrence), ``arrival_spread_ns`` (last arrival minus first) and
    ``wait_ns`` (the last arrival minus this rank's)."""
    n = ranks_recorded(data)
    rows = selected_sql(data, "comms", launched=True)
    return f"""
    WITH c AS (SELECT rank, step, name, coalesce(group_name, '') AS grp, start_ns, end_ns,
                      row_number() OVER (PARTITION BY rank, name, coalesce(group_name, '')
                          ORDER BY start_ns, end_ns) AS k
               FROM comms WHERE name NOT IN ({P2P})),
         sel AS (SELECT DISTINCT rank, step FROM ({rows})),
         m AS (SELECT *, count(*) OVER o AS n, max(start_ns) OVER o - start_ns AS wait_ns,
                      max(start_ns) OVER o - min(start_ns) OVER o AS arrival_spread_ns
               FROM c WINDOW o AS (PARTITION BY name, grp, k))
    SELECT m.* EXCLUDE (n) FROM m SEMI JOIN sel ON sel.rank = m.rank AND sel.step IS NOT DISTINCT FROM m.step
    WHERE n = {n}"""


def step_wait_sql(data: ProfileData) -> str:
    """SQL: per (rank, step) with matched collectives: ``wait_ns`` (summed waits for the other
    ranks) and ``collectives``."""
    return f"""SELECT rank, step, sum(wait_ns)::BIGINT AS wait_ns, count(*) AS collectives
               FROM ({matched_sql(data)}) WHERE step IS NOT NULL GROUP BY ALL"""
