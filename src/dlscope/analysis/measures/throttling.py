"""Clock throttling: how often each GPU ran under a power or thermal limit while busy (NVML's
clocks event reasons), and its clock, temperature and power then.

Measured over the timed steps' samples: each ``throttle_reasons`` sample is paired with the
nearest earlier ``gpu_util``, ``sm_clock``, ``temperature`` and ``power`` sample of its device. A
sample counts as busy when its utilization is above 0 (or unknown), and as throttled when one of
:data:`THROTTLE_BITS` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.intervals import points_in_sql
from . import measured

# NVML clocks event reasons (nvml.h: nvmlClocksEventReason*). Idle (0x1), application clocks
# (0x2), sync boost (0x10) and display clock (0x100) are settings, not limits, and are ignored.
THROTTLE_BITS: dict[int, str] = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}


@dataclass(frozen=True)
class DeviceThrottling:
    """One GPU's throttle-reason samples in the timed steps."""

    device: int
    busy_samples: int  # samples while the GPU was busy
    throttled_samples: int  # of those, with a power or thermal reason set
    reasons: int | None  # the reasons seen (bits of THROTTLE_BITS), or'ed
    clock_throttled_mhz: float | None  # mean SM clock in the throttled busy samples
    clock_max_mhz: float | None  # highest SM clock sampled (any device, any time)
    util_pct: float | None  # mean utilization
    temperature_max_c: float | None
    power_max_w: float | None
    steps: tuple[int, ...]  # the steps with a throttled sample


@measured
def throttle_reasons_sampled(data: ProfileData) -> bool:
    """Whether NVML's throttle reasons were sampled."""
    return bool(data.scalar("SELECT count(*) FROM counters WHERE metric = 'throttle_reasons'"))


@measured
def throttling_by_device(data: ProfileData) -> tuple[DeviceThrottling, ...]:
    """Per GPU with throttle-reason samples in the timed steps, most throttled samples first."""
    mask = sum(THROTTLE_BITS)
    # a bucketed range join: as a plain join, 10 minutes of samples by 100k steps took 26 s
    samples_in_steps = points_in_sql(
        "SELECT device, ts_ns, metric, value FROM counters "
        "WHERE metric IN ('throttle_reasons', 'gpu_util', 'sm_clock', 'temperature', 'power')",
        "SELECT * FROM stat_steps",
        "p.device, p.ts_ns, p.metric, p.value, i.step",
    )
    # each throttle sample with the nearest earlier utilization and clock sample of its device
    rows = data.rows(f"""
        WITH s AS ({samples_in_steps}),
             t AS (SELECT device, ts_ns, step, value::BIGINT AS bits FROM s WHERE metric = 'throttle_reasons'),
             m AS (SELECT t.*, u.value AS util, k.value AS clock, tp.value AS temp, pw.value AS power FROM t
                   ASOF LEFT JOIN (SELECT * FROM s WHERE metric = 'gpu_util') u
                     ON u.device = t.device AND t.ts_ns >= u.ts_ns
                   ASOF LEFT JOIN (SELECT * FROM s WHERE metric = 'sm_clock') k
                     ON k.device = t.device AND t.ts_ns >= k.ts_ns
                   ASOF LEFT JOIN (SELECT * FROM s WHERE metric = 'temperature') tp
                     ON tp.device = t.device AND t.ts_ns >= tp.ts_ns
                   ASOF LEFT JOIN (SELECT * FROM s WHERE metric = 'power') pw
                     ON pw.device = t.device AND t.ts_ns >= pw.ts_ns)
        SELECT device, count(*) FILTER (WHERE coalesce(util, 1) > 0) AS busy,
               count(*) FILTER (WHERE coalesce(util, 1) > 0 AND (bits & {mask}) <> 0) AS throttled,
               bit_or(bits & {mask}) AS reasons,
               avg(clock) FILTER (WHERE coalesce(util, 1) > 0 AND (bits & {mask}) <> 0) AS clock_throttled,
               (SELECT max(value) FROM counters WHERE metric = 'sm_clock') AS clock_max,
               avg(util) FILTER (WHERE util IS NOT NULL) AS util,
               max(temp) AS temp_max, max(power) AS power_max,
               list(DISTINCT step ORDER BY step) FILTER (WHERE (bits & {mask}) <> 0) AS steps
        FROM m GROUP BY device ORDER BY throttled DESC""")
    return tuple(
        DeviceThrottling(
            r["device"],
            r["busy"],
            r["throttled"],
            r["reasons"],
            r["clock_throttled"],
            r["clock_max"],
            r["util"],
            r["temp_max"],
            r["power_max"],
            tuple(r["steps"] or ()),
        )
        for r in rows
    )
