"""Quantities over time, in fixed bins across the selected span: how busy each GPU was (from its
own kernels, copies and sets), the sampled hardware counters, and the application phases that
were running (to shade the plots with)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from .context import ProfileData
from .phases import shown_phases_sql
from .window import selected_span

_GPU_TABLES = ("kernels", "memcpy", "memset")


@dataclass(frozen=True)
class Bins:
    start_ns: int
    width_ns: int
    count: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.width_ns * self.count


def time_bins(data: ProfileData, count: int = 200) -> Bins | None:
    """``count`` equal bins over the selected span; None for a profile without events."""
    span = selected_span(data)
    if span is None:
        return None
    start, end = span
    width = max(1, -(-(end - start) // count))
    return Bins(start, width, count)


def gpu_busy(data: ProfileData, bins: Bins) -> pa.Table:
    """Per (rank, device) and bin: ``busy_pct``, the share of the bin during which at least one
    kernel, copy or set ran on the device (overlapping streams count once)."""
    present = [t for t in _GPU_TABLES if data.has(t)]
    if not present:
        return pa.table(
            {
                "rank": pa.array([], pa.int32()),
                "device": pa.array([], pa.int32()),
                "bin": pa.array([], pa.int64()),
                "busy_pct": pa.array([], pa.float64()),
            }
        )
    b0, w, n = bins.start_ns, bins.width_ns, bins.count
    gpu = " UNION ALL ".join(
        f"SELECT rank, device, start_ns AS s, end_ns AS e FROM {t} "
        f"WHERE end_ns > {b0} AND start_ns < {bins.end_ns} AND device IS NOT NULL"
        for t in present
    )
    return data.table(f"""
        WITH g AS ({gpu}),
        o AS (SELECT *, max(e) OVER (PARTITION BY rank, device ORDER BY s, e
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM g),
        isl AS (SELECT *, sum(CASE WHEN reach IS NULL OR s > reach THEN 1 ELSE 0 END)
                          OVER (PARTITION BY rank, device ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS island FROM o),
        merged AS (SELECT rank, device, min(s) AS s, max(e) AS e FROM isl GROUP BY rank, device, island),
        bins AS (SELECT i AS bin, {b0} + i * {w} AS lo, {b0} + (i + 1) * {w} AS hi FROM range({n}) r(i)),
        devs AS (SELECT DISTINCT rank, device FROM g),
        busy AS (SELECT m.rank, m.device, b.bin,
                        sum(least(m.e, b.hi) - greatest(m.s, b.lo))::DOUBLE AS ns
                 FROM merged m JOIN bins b ON m.s < b.hi AND m.e > b.lo GROUP BY ALL)
        SELECT d.rank, d.device, b.bin, 100.0 * coalesce(busy.ns, 0) / {w} AS busy_pct
        FROM devs d CROSS JOIN bins b LEFT JOIN busy ON busy.rank = d.rank AND busy.device = d.device
             AND busy.bin = b.bin
        ORDER BY d.rank, d.device, b.bin""")


def counters_binned(data: ProfileData, bins: Bins) -> pa.Table:
    """Per (rank, device, metric) and bin with samples: ``mean``, ``min`` and ``max`` of the samples."""
    return data.table(f"""
        SELECT rank, device, metric, (ts_ns - {bins.start_ns}) // {bins.width_ns} AS bin,
               avg(value) AS mean, min(value) AS min, max(value) AS max
        FROM counters WHERE ts_ns >= {bins.start_ns} AND ts_ns < {bins.end_ns} AND isfinite(value)
        GROUP BY ALL ORDER BY rank, device, metric, bin""")


def phase_bands(data: ProfileData, bins: Bins) -> pa.Table:
    """The outermost phases (of those a breakdown shows) of the first rank inside the span:
    (name, start_ns, end_ns, instances). Instances of one name less than half a bin apart are
    merged into one band: a plot cannot show them apart, and a long run has millions (one
    band per instance made a 1-hour run's report hundreds of MB)."""
    gap = max(1, bins.width_ns // 2)
    return data.table(f"""
        WITH b AS (SELECT name, start_ns, end_ns FROM ({shown_phases_sql(data)})
                   WHERE depth = 0 AND rank = (SELECT min(rank) FROM phases)
                     AND end_ns > {bins.start_ns} AND start_ns < {bins.end_ns}),
             g AS (SELECT *, CASE WHEN start_ns - max(end_ns) OVER (PARTITION BY name ORDER BY start_ns, end_ns
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) <= {gap} THEN 0 ELSE 1 END AS new
                   FROM b),
             h AS (SELECT *, sum(new) OVER (PARTITION BY name ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS grp
                   FROM g)
        SELECT name, min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS instances
        FROM h GROUP BY name, grp ORDER BY start_ns, name""")
