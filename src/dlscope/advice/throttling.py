"""throttling: the GPU ran below its clock because of a power or thermal limit (NVML's clocks
event reasons).

Measured over the timed steps' samples while the GPU was busy (NVML ``gpu_util`` > 0): the share
of samples with a power or thermal reason set (:data:`THROTTLE_BITS`), the SM clock in those
samples against the highest clock seen, temperature and power.

Saving (upper bound): the GPU busy time per step (NVML utilization times the step) times the
throttled share times (1 - throttled clock / highest clock): the work would take that much less
at full clock. Capped by the time the host waited for the GPU when runtime calls were recorded.
"""

from __future__ import annotations

from ..analysis.intervals import points_in_sql
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct, steps

# NVML clocks event reasons (nvml.h: nvmlClocksEventReason*). Idle (0x1), application clocks
# (0x2), sync boost (0x10) and display clock (0x100) are settings, not limits, and are ignored.
THROTTLE_BITS: dict[int, str] = {
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
# dlscope's own line: a limit hit in fewer than 5% of the busy samples is a transient.
MIN_THROTTLED_SHARE = 0.05
URL = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"


class Throttling(Rule):
    id = "throttling"
    judges_untraced = True  # step times / NVML samples of every step
    title = "The GPU is throttled by a power or thermal limit"
    description = "NVML reports power or thermal clock throttling while the GPU is busy"
    needs = ("counters",)
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        if not ctx.data.scalar("SELECT count(*) FROM counters WHERE metric = 'throttle_reasons'"):
            return "NVML's throttle reasons were not sampled"
        return None

    def check(self, ctx: Context) -> Finding | None:
        d = ctx.data
        mask = sum(THROTTLE_BITS)
        # a bucketed range join: as a plain join, 10 minutes of samples by 100k steps took 26 s
        samples_in_steps = points_in_sql(
            "SELECT device, ts_ns, metric, value FROM counters "
            "WHERE metric IN ('throttle_reasons', 'gpu_util', 'sm_clock', 'temperature', 'power')",
            "SELECT * FROM stat_steps", "p.device, p.ts_ns, p.metric, p.value, i.step")
        # each throttle sample with the nearest earlier utilization and clock sample of its device
        rows = d.rows(f"""
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
        if not rows or not rows[0]["busy"]:
            return None
        r = rows[0]
        share = r["throttled"] / r["busy"]
        if share < MIN_THROTTLED_SHARE:
            return None
        slow = 1 - (r["clock_throttled"] / r["clock_max"]) if r["clock_throttled"] and r["clock_max"] else 0.0
        busy_ms = (r["util"] or 100.0) / 100.0 * ctx.basis.unit_ms
        gpu_saving = busy_ms * share * slow
        saving, cap_note = ctx.gpu_saving_cap(gpu_saving) if ctx.basis.windows else (gpu_saving, "")
        reasons = [name for bit, name in THROTTLE_BITS.items() if (r["reasons"] or 0) & bit]
        text = (f"GPU {r['device']} was throttled ({', '.join(reasons)}) in {pct(100 * share)} of the samples while busy"
                + (f", at {r['clock_throttled']:.0f} MHz against {r['clock_max']:.0f} MHz" if r["clock_throttled"] else "")
                + (f"; up to {r['temp_max']:.0f} C" if r["temp_max"] is not None else "")
                + (f", {r['power_max']:.0f} W" if r["power_max"] is not None else ""))
        how = (f"the GPU's busy time ({ms(busy_ms)} per step) ran {pct(100 * share)} of the time {pct(100 * slow)} slower "
               f"than its top clock: up to {ms(saving)} per step" + (f" ({cap_note})" if cap_note else ""))
        if ctx.pct(gpu_saving) is None or (ctx.pct(gpu_saving) < MIN_SAVING_PCT and slow > 0):
            return None
        thermal = any("thermal" in x for x in reasons)
        advice = ("The GPU hits its " + ("thermal" if thermal else "power") + " limit: this is the machine, not the "
                  "code. Check nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE while it runs; "
                  + ("improve cooling (airflow, fan curves, a cooler rack position)" if thermal else
                     "raise the power limit if the administrator allows it (nvidia-smi -pl), or check whether another "
                     "process shares the GPU") + ". Compare step times on a healthy GPU before tuning the program.")
        row = {"device": r["device"], "throttled_pct": 100 * share, "reasons": ", ".join(reasons),
               "clock_throttled_mhz": r["clock_throttled"], "clock_max_mhz": r["clock_max"],
               "temperature_max_c": r["temp_max"], "power_max_w": r["power_max"], "steps": steps(r["steps"] or [])}
        return self.finding(ctx, saving, Evidence(text, how, [row]), advice, url=URL)


RULE = Throttling()
