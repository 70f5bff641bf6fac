"""The islands of the main process's range phases whose names match a pattern: where the host
was loading data, in the model's passes, in the optimizer, waiting for the GPU.

The host classes' time in each step (:mod:`.class_times`) and the replay's split of the host's
work between calls (:mod:`..models.replay`) read these islands for seven combinations of the
class patterns. Each was one query (a regular expression over the phases' names, a union by
window functions): ~4 ms of fixed cost apiece, whatever the number of phases, ~30 ms of a
command. Here the phases are read once per opened profile with a flag per pattern, and each
combination's islands are a union in numpy (:func:`.interval_arrays.union`: the same islands
as :func:`.intervals.union_sql`). A name matches ``(A)|(B)`` exactly when it matches ``A`` or
``B``, so a combination is the OR of its patterns' flags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import interval_arrays as ia
from .context import ProfileData
from .host_classes import CLASS_RE, SYNC_PHASE_RE
from .host_state import NOT_ACTIVITY_DOMAINS, main_pid_sql

# Every pattern a caller may ask for: the host classes' and the host's waits.
PATTERNS: tuple[str, ...] = (*dict.fromkeys(CLASS_RE.values()), SYNC_PHASE_RE)


@dataclass(frozen=True)
class RangePhases:
    """The main process's range phases: their rank and times, whether each is the program's
    activity (not a process or trace span: :data:`.host_state.NOT_ACTIVITY_DOMAINS`) and, per
    pattern of :data:`PATTERNS`, whether its lower-cased name matches."""

    rank: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    activity: np.ndarray
    matches: dict[str, np.ndarray]


def range_phases(data: ProfileData) -> RangePhases:
    """:class:`RangePhases` of ``data``, read once per opened profile."""
    phases: RangePhases = data.computed("range_phases", lambda: _read(data))
    return phases


def _read(data: ProfileData) -> RangePhases:
    if not data.has("phases"):
        empty = np.zeros(0, np.int64)
        return RangePhases(empty, empty, empty, np.zeros(0, bool), {p: np.zeros(0, bool) for p in PATTERNS})
    domains = ", ".join(f"'{d}'" for d in NOT_ACTIVITY_DOMAINS)
    flags = ", ".join(f"coalesce(regexp_matches(lower(p.name), '{p}'), FALSE) AS m{i}" for i, p in enumerate(PATTERNS))
    got = data.con.execute(
        f"""WITH mp AS ({main_pid_sql(data)})
            SELECT p.rank, p.start_ns, p.end_ns, coalesce(p.domain, '') NOT IN ({domains}) AS activity, {flags}
            FROM phases p LEFT JOIN mp m USING (rank)
            WHERE p.kind = 'range' AND (m.pid IS NULL OR p.pid IS NULL OR p.pid = m.pid)
              AND p.start_ns IS NOT NULL AND p.end_ns IS NOT NULL"""
    ).fetchnumpy()
    return RangePhases(
        np.asarray(got["rank"], np.int64),
        np.asarray(got["start_ns"], np.int64),
        np.asarray(got["end_ns"], np.int64),
        np.asarray(got["activity"], bool),
        {p: np.asarray(got[f"m{i}"], bool) for i, p in enumerate(PATTERNS)},
    )


def islands(data: ProfileData, patterns: tuple[str, ...], activity_only: bool = False) -> ia.Intervals:
    """The islands per rank (rank, start_ns, end_ns, sorted) of the range phases whose names match
    any of ``patterns`` (each one of :data:`PATTERNS`); ``activity_only``: of the program's
    activity alone (not its process's or trace's own spans)."""
    p = range_phases(data)
    keep = np.logical_or.reduce([p.matches[x] for x in patterns]) if patterns else np.zeros(len(p.rank), bool)
    if activity_only:
        keep = keep & p.activity
    return ia.union({"rank": p.rank[keep], "start_ns": p.start_ns[keep], "end_ns": p.end_ns[keep]})
