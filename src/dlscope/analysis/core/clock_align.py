"""Putting profiles recorded on different hosts on one clock, from the collectives they share.

Each host's profile is on its own clock (epoch nanoseconds from that host's clock, with its own
offset and rate). A collective ends at one instant on every rank that ran it: the data exchange is
complete everywhere at once, up to the network's last hop (microseconds). So the ends of the
collectives both profiles ran (all-reduce, all-gather, reduce-scatter, all-to-all: those with no
root), matched by operation, process group and occurrence, give pairs of
readings of one instant on the two clocks; a straight line through them (least squares, refitted
without outliers beyond :data:`OUTLIER_MADS` median absolute deviations) gives the other host's
offset and rate against the reference, and the residuals say how well the clocks now agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .context import ProfileData

# operations that do not end at one instant on every rank: point-to-point ones, and rooted ones
# (the root of a broadcast is done once it has sent; on a 2-GPU H100 job, broadcast ends differed
# by 12 us to 33 ms between the ranks, all-reduce ends by 8-20 us)
NOT_ONE_INSTANT = ("send", "recv", "sendrecv", "broadcast", "reduce", "gather", "scatter")
OUTLIER_MADS = 5.0
MIN_MATCHED = 3


@dataclass(frozen=True)
class ClockFit:
    """other clock = ref_anchor-relative line: ``t_other = other_anchor + intercept + rate * (t_ref - ref_anchor)``."""

    matched: int  # collectives used
    ref_anchor: int  # ns on the reference clock (the first matched end)
    other_anchor: int  # ns on the other clock (its first matched end)
    intercept_ns: float
    rate: float  # other clock's ns per reference ns (1 + drift)
    residual_max_ns: float  # the largest distance of a matched pair from the line, after the fit
    residual_rms_ns: float

    @property
    def offset_ns(self) -> float:
        """other minus reference at the reference anchor."""
        return float(self.other_anchor - self.ref_anchor) + self.intercept_ns

    @property
    def drift_ppm(self) -> float:
        return (self.rate - 1.0) * 1e6

    def to_ref(self, t: np.ndarray) -> np.ndarray:
        """Times on the other clock, on the reference clock (int64 ns)."""
        rel = (np.asarray(t, dtype=np.int64) - self.other_anchor).astype(np.float64)
        return self.ref_anchor + np.rint((rel - self.intercept_ns) / self.rate).astype(np.int64)


def collective_ends(data: ProfileData) -> dict[tuple[str, str, int], int]:
    """(operation, process group, occurrence) -> end time, on the profile's lowest rank."""
    if not data.has("comms"):
        return {}
    rows = data.con.execute(f"""
        SELECT name, coalesce(group_name, '') AS grp,
               row_number() OVER (PARTITION BY name, coalesce(group_name, '') ORDER BY start_ns, end_ns) AS k, end_ns
        FROM comms WHERE rank = (SELECT min(rank) FROM comms)
          AND name NOT IN ({", ".join(f"'{p}'" for p in NOT_ONE_INSTANT)})""").fetchall()
    return {(n, g, int(k)): int(e) for n, g, k, e in rows}


def fit_clock(ref: ProfileData, other: ProfileData) -> ClockFit | None:
    """The other profile's clock against the reference's; None with fewer than
    :data:`MIN_MATCHED` shared collectives."""
    a, b = collective_ends(ref), collective_ends(other)
    keys = sorted(set(a) & set(b), key=lambda k: a[k])
    if len(keys) < MIN_MATCHED:
        return None
    x = np.array([a[k] for k in keys], dtype=np.int64)
    y = np.array([b[k] for k in keys], dtype=np.int64)
    x0, y0 = int(x[0]), int(y[0])
    xr, yr = (x - x0).astype(np.float64), (y - y0).astype(np.float64)
    keep = np.ones(len(xr), bool)
    for _ in range(3):
        rate, intercept = np.polyfit(xr[keep], yr[keep], 1) if keep.sum() >= 2 else (1.0, float(np.median(yr - xr)))
        res = yr - (intercept + rate * xr)
        mad = float(np.median(np.abs(res[keep] - np.median(res[keep])))) or 1.0
        new = np.abs(res - np.median(res[keep])) <= OUTLIER_MADS * mad * 1.4826 + 1.0
        if new.sum() < MIN_MATCHED or np.array_equal(new, keep):
            break
        keep = new
    res = yr[keep] - (intercept + rate * xr[keep])
    return ClockFit(
        int(keep.sum()),
        x0,
        y0,
        float(intercept),
        float(rate),
        float(np.abs(res).max()) / rate,
        float(np.sqrt(np.mean(res**2))) / rate,
    )
