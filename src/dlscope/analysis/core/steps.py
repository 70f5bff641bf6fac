"""Step statistics: how long an iteration takes and how steady it is."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .context import ProfileData

# One throughput everywhere (summary, diff, report, check): the selected steps over their summed
# time, i.e. 1000 / the mean step in ms, which is what nsys and DLProf users call throughput (it
# counts the slow steps a run really pays for; the median step is shown apart, as p50).
THROUGHPUT_BASIS = "steps/s = 1000 / mean step ms; samples/s = batch size x steps/s"


def throughput(mean_ms: float | None, batch: int | None) -> tuple[float | None, float | None]:
    """(steps/s, samples/s) from the mean step time in ms; samples/s is None without a batch size."""
    steps_per_s = 1e3 / mean_ms if mean_ms else None
    return steps_per_s, (steps_per_s * batch if steps_per_s and batch else None)


@dataclass
class StepStats:
    """Statistics over the selected steps not slowed by detailed tracing (``stat_steps``).
    Percentiles interpolate linearly between samples (numpy's default); ``std_ms`` is the sample
    standard deviation (n - 1)."""

    count: int
    mean_ms: float | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    std_ms: float | None
    min_ms: float | None
    max_ms: float | None
    total_ms: float
    steps_per_s: float | None
    samples_per_s: float | None
    total_steps: int  # recorded, before selection
    warmup_excluded: list[int]  # warm-up step numbers left out
    traced_excluded: list[int]  # steps left out because detailed tracing slowed them
    first_step: int | None
    last_step: int | None
    ranks: int
    steps_per_rank: int = 0  # distinct step numbers measured (count = this x ranks in lock step)
    throughput_basis: str = THROUGHPUT_BASIS  # how steps_per_s and samples_per_s are defined
    batch_size: int | None = None
    # where the batch size came from (meta.json's batch_size_source: 'given', 'DataLoader.batch_size',
    # 'first batch'); None when unknown or not recorded (profiles written before it was)
    batch_size_source: str | None = None
    # where the recorded steps came from (steps.source: 'dlscope', 'profiler_step', 'optimizer', 'key_node',
    # 'session_run', 'jit_executable'; several joined by ', '); None without steps
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_stats(data: ProfileData) -> StepStats:
    row = data.rows("""
        SELECT count(*) AS n, avg(d) AS mean, quantile_cont(d, 0.5) AS p50, quantile_cont(d, 0.95) AS p95,
               quantile_cont(d, 0.99) AS p99, stddev_samp(d) AS std, min(d) AS mn, max(d) AS mx,
               coalesce(sum(d), 0) AS total, min(step) AS first, max(step) AS last,
               count(DISTINCT rank) AS ranks, count(DISTINCT step) AS distinct_steps
        FROM (SELECT step, rank, (end_ns - start_ns)::DOUBLE AS d FROM stat_steps)""")[0]
    total_steps = int(data.scalar("SELECT count(*) FROM steps") or 0)
    sources = [r["source"] for r in data.rows("SELECT DISTINCT source FROM steps ORDER BY source")]
    warm = [r["step"] for r in data.rows("SELECT DISTINCT step FROM steps WHERE warmup ORDER BY step")]
    excluded = [s for s in warm if s not in set(r["step"] for r in data.rows("SELECT DISTINCT step FROM sel_steps"))]

    def ms(v: float | None) -> float | None:
        return None if v is None else v / 1e6

    n = int(row["n"])
    mean = row["mean"]
    steps_per_s, samples_per_s = throughput(ms(mean), data.meta.batch_size)
    return StepStats(
        count=n,
        mean_ms=ms(mean),
        p50_ms=ms(row["p50"]),
        p95_ms=ms(row["p95"]),
        p99_ms=ms(row["p99"]),
        std_ms=ms(row["std"]),
        min_ms=ms(row["mn"]),
        max_ms=ms(row["mx"]),
        total_ms=row["total"] / 1e6,
        steps_per_s=steps_per_s,
        samples_per_s=samples_per_s,
        total_steps=total_steps,
        warmup_excluded=excluded,
        traced_excluded=list(data.traced_excluded),
        first_step=row["first"],
        last_step=row["last"],
        ranks=int(row["ranks"] or 0),
        steps_per_rank=int(row["distinct_steps"] or 0),
        batch_size=data.meta.batch_size,
        batch_size_source=data.meta.batch_size_source,
        source=", ".join(str(x) for x in sources) if sources else None,
    )
