"""throttling: the GPU ran below its clock because of a power or thermal limit (NVML's clocks
event reasons).

Measured (:mod:`dlscope.analysis.measures.throttling`) over the timed steps' samples while the
GPU was busy (NVML ``gpu_util`` > 0): the share of samples with a power or thermal reason set
(``THROTTLE_BITS``), the SM clock in those samples against the highest clock seen, temperature
and power.

Saving (upper bound): the GPU busy time per step (NVML utilization times the step) times the
throttled share times (1 - throttled clock / highest clock): the work would take that much less
at full clock. Capped by the time the host waited for the GPU when runtime calls were recorded.
"""

from __future__ import annotations

from ..vocabulary.names import RuleId
from .context import Context
from .finding import Evidence, Finding
from .rule import MIN_SAVING_PCT, Rule
from .text import ms, pct, steps

# dlscope's own line: a limit hit in fewer than 5% of the busy samples is a transient.
MIN_THROTTLED_SHARE = 0.05
URL = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html"


class Throttling(Rule):
    id = RuleId.THROTTLING
    no_try_fix = "the GPU's power or thermal limit: the machine, not the program"
    judges_untraced = True  # step times / NVML samples of every step
    title = "The GPU is throttled by a power or thermal limit"
    description = "NVML reports power or thermal clock throttling while the GPU is busy"
    needs = ("counters",)
    needs_steps = True

    def precondition(self, ctx: Context) -> str | None:
        from ..analysis.measures.throttling import throttle_reasons_sampled

        if not throttle_reasons_sampled(ctx.data):
            return "NVML's throttle reasons were not sampled"
        return None

    def check(self, ctx: Context) -> Finding | None:
        from ..analysis.measures.throttling import THROTTLE_BITS, throttling_by_device

        rows = throttling_by_device(ctx.data)
        if not rows or not rows[0].busy_samples:
            return None
        r = rows[0]
        share = r.throttled_samples / r.busy_samples
        if share < MIN_THROTTLED_SHARE:
            return None
        slow = 1 - (r.clock_throttled_mhz / r.clock_max_mhz) if r.clock_throttled_mhz and r.clock_max_mhz else 0.0
        busy_ms = (r.util_pct or 100.0) / 100.0 * ctx.basis.unit_ms
        gpu_saving = busy_ms * share * slow
        saving, cap_note = ctx.gpu_saving_cap(gpu_saving) if ctx.basis.windows else (gpu_saving, "")
        reasons = [name for bit, name in THROTTLE_BITS.items() if (r.reasons or 0) & bit]
        text = (
            f"GPU {r.device} was throttled ({', '.join(reasons)}) in {pct(100 * share)} of the samples while busy"
            + (
                f", at {r.clock_throttled_mhz:.0f} MHz against {r.clock_max_mhz:.0f} MHz"
                if r.clock_throttled_mhz
                else ""
            )
            + (f"; up to {r.temperature_max_c:.0f} C" if r.temperature_max_c is not None else "")
            + (f", {r.power_max_w:.0f} W" if r.power_max_w is not None else "")
        )
        how = (
            f"the GPU's busy time ({ms(busy_ms)} per step) ran {pct(100 * share)} of the time {pct(100 * slow)} slower "
            f"than its top clock: up to {ms(saving)} per step" + (f" ({cap_note})" if cap_note else "")
        )
        p = ctx.pct(gpu_saving)
        if p is None or (p < MIN_SAVING_PCT and slow > 0):
            return None
        thermal = any("thermal" in x for x in reasons)
        advice = (
            "The GPU hits its " + ("thermal" if thermal else "power") + " limit: this is the machine, not the "
            "code. Check nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE while it runs; "
            + (
                "improve cooling (airflow, fan curves, a cooler rack position)"
                if thermal
                else (
                    "raise the power limit if the administrator allows it (nvidia-smi -pl), or check whether another "
                    "process shares the GPU"
                )
            )
            + ". Compare step times on a healthy GPU before tuning the program."
        )
        row = {
            "device": r.device,
            "throttled_pct": 100 * share,
            "reasons": ", ".join(reasons),
            "clock_throttled_mhz": r.clock_throttled_mhz,
            "clock_max_mhz": r.clock_max_mhz,
            "temperature_max_c": r.temperature_max_c,
            "power_max_w": r.power_max_w,
            "steps": steps(r.steps),
        }
        return self.finding(ctx, saving, Evidence(text, how, [row]), advice, url=URL)


RULE = Throttling()
