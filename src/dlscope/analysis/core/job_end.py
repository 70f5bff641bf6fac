"""How a distributed job ended, when a rank of it ended abnormally: the line ``summary`` and
``advise`` lead with, and the steps the statistics keep (those every rank completed; see
``ProfileData._common_steps_sql``)."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field
from typing import Any

from ...store.meta import RankEnd
from .context import ProfileData


def how_ended(exit_code: int | None, sig: int | None) -> str:
    """'killed by signal 9 (SIGKILL)', 'exit code 1', or 'killed (no exit seen)'."""
    if sig is not None:
        try:
            return f"killed by signal {sig} ({signal.Signals(sig).name})"
        except ValueError:
            return f"killed by signal {sig}"
    if exit_code is not None:
        return f"exit code {exit_code}"
    return "killed (it wrote nothing at its end, and no exit was seen)"


@dataclass
class JobEnd:
    """A job one of whose ranks ended abnormally. ``ranks``: every rank's end, the first to end
    first; ``died_s``: seconds from the profile's start to each one's end (None: unknown);
    ``analysed_steps``: the step numbers every rank completed; ``excluded_steps``: those
    some rank did not."""

    line: str
    ranks: list[RankEnd]
    died_s: list[float | None]
    analysed_steps: list[int] = field(default_factory=list)
    excluded_steps: list[int] = field(default_factory=list)

    def rank_lines(self) -> list[str]:
        return [
            f"rank {r.rank} (pid {r.pid}): {how_ended(r.exit_code, r.signal)}"
            + (f" at {t:.2f} s" if t is not None else "")
            + f", after {r.steps_completed} step{'s' if r.steps_completed != 1 else ''}"
            + (
                ""
                if r.clean_stop
                else "; not stopped cleanly: its steps are kept to its end, its other events to its last flush"
            )
            for r, t in zip(self.ranks, self.died_s)
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "ranks": [asdict(r) | {"died_s": t} for r, t in zip(self.ranks, self.died_s)],
            "analysed_steps": self.analysed_steps,
            "excluded_steps": self.excluded_steps,
        }


def job_end(data: ProfileData) -> JobEnd | None:
    """The job's abnormal end, or None when every rank ended well (or the profile is not of a job)."""
    end = data.meta.run_end
    if end is None or not end.failed_ranks:
        return None
    start = data.meta.start_ns
    ranks = sorted(end.ranks, key=lambda r: (r.end_ns is None, r.end_ns or 0, r.rank))
    died = [(r.end_ns - start) / 1e9 if r.end_ns is not None and start is not None else None for r in ranks]
    first = next(r for r in ranks if r.failed)
    line = (
        f"the job ended abnormally (exit code {end.exit_code}): rank {first.rank} "
        f"{how_ended(first.exit_code, first.signal)} after {first.steps_completed} "
        f"step{'s' if first.steps_completed != 1 else ''}"
    )
    analysed = [int(r[0]) for r in data.con.execute("SELECT DISTINCT step FROM sel_steps ORDER BY 1").fetchall()]
    if data.incomplete_excluded:
        line += f"; statistics cover only the steps every rank completed ({len(data.incomplete_excluded)} left out)"
    return JobEnd(line, ranks, died, analysed, list(data.incomplete_excluded))
