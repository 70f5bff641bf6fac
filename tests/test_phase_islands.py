"""The host-class islands read once per profile (:mod:`dlscope.analysis.core.phase_islands`) against
one SQL query per combination of patterns, as they were computed before: a regular expression
``(A)|(B)`` over the lower-cased names and :func:`union_sql`, on real profiles whose phases carry
every class (dlscope's hooks on H100/H200 runs, a DDP job's ranks, a Lightning-free CPU run)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.host_state import NOT_ACTIVITY_DOMAINS, main_pid_sql
from dlscope.analysis.core.intervals import union_sql
from dlscope.analysis.core.phase_islands import PATTERNS, islands

DATA = Path(__file__).parent / "data"
PROFILES = [
    DATA / "try_bert" / "bert_h200_first_run.dlscope",
    DATA / "phase_gpu" / "gpt2_baseline.dlscope",
    DATA / "advice_truth" / "cnn_workers_default.dlscope",
    DATA / "advice_truth_dist" / "ddp2_balanced_a.dlscope",
]


def by_sql(data: ProfileData, patterns: tuple[str, ...], activity_only: bool) -> dict[str, list[int]]:
    regex = "|".join(f"({p})" for p in patterns)
    domains = ", ".join(f"'{d}'" for d in NOT_ACTIVITY_DOMAINS)
    activity = f"AND coalesce(p.domain, '') NOT IN ({domains})" if activity_only else ""
    src = f"""SELECT p.rank, p.start_ns, p.end_ns FROM phases p LEFT JOIN mp m USING (rank)
              WHERE p.kind = 'range' AND (m.pid IS NULL OR p.pid IS NULL OR p.pid = m.pid) {activity}
                AND regexp_matches(lower(p.name), '{regex}')"""
    got = data.con.execute(
        f"WITH mp AS ({main_pid_sql(data)}) SELECT rank, start_ns, end_ns FROM ({union_sql(src, 'rank')}) "
        "ORDER BY rank, start_ns"
    ).fetchnumpy()
    return {k: np.asarray(v).tolist() for k, v in got.items()}


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_every_combination_of_patterns_gives_the_islands_of_one_sql_query(path):
    data = ProfileData.open(path)
    combos = [c for n in range(1, len(PATTERNS) + 1) for c in combinations(PATTERNS, n)]
    nonempty = 0
    for patterns in combos:
        for activity_only in (False, True):
            want = by_sql(data, patterns, activity_only)
            got = {k: np.asarray(v).tolist() for k, v in islands(data, patterns, activity_only).items()}
            assert got == want, (patterns, activity_only)
            nonempty += bool(want["start_ns"])
    assert nonempty >= len(combos)  # the profiles' phases match the patterns: the comparison is not of empties


def test_a_hand_made_profile_where_every_filter_matters(tmp_path):
    """Phases that touch (merge), nest, belong to another process (left out) or are the process's
    and the trace's own spans named like a class (left out of the program's activity only)."""
    from .advice_helpers import Loop

    lp = Loop()
    lp.step(0, 0, 100)
    lp.phase("forward", 0, 100, domain="process")  # a process span named like a class
    lp.phase("optimizer", 0, 100, domain="trace")
    lp.phase("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1, 5, domain="torch")
    lp.phase("forward", 5, 30, domain="hook")
    lp.phase("forward", 30, 40, domain="hook")  # touches the one before: one island
    lp.phase("backward", 42, 70, domain="hook")
    lp.phase("Optimizer.step#Adam.step", 70, 90, domain="torch")
    lp.phase("sync", 80, 85, domain="hook")  # inside the optimizer's step
    lp.tables["phases"].append(dict(pid=2, tid=9, start_ns=95 * 1_000_000, end_ns=99 * 1_000_000, name="forward"))
    lp.kernel("k", 10, 11, 12)  # the main process is the one launching GPU work
    data = lp.open(tmp_path)
    seen = set()
    for n in range(1, len(PATTERNS) + 1):
        for patterns in combinations(PATTERNS, n):
            for activity_only in (False, True):
                want = by_sql(data, patterns, activity_only)
                got = {k: np.asarray(v).tolist() for k, v in islands(data, patterns, activity_only).items()}
                assert got == want, (patterns, activity_only)
                seen.add(tuple(want["start_ns"]))
    assert len(seen) >= 6  # the combinations differ here: a filter left out would show
