"""``dlscope check``: is a profile a significant regression against a baseline?

The baseline is either another profile (its step times are a sample: two-sample tests, see
:mod:`.significance`) or a saved ``dlscope summary --format json`` (single numbers: the
current profile's bootstrap interval must exclude the baseline's value). A metric regresses when
it got worse by more than the allowed share *and* the change is significant: a noisy run that is
5.1% slower by chance does not fail CI, and neither does a significant 0.5% change.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ...errors import InputError
from ..core.context import ProfileData
from ..reports import gpu_metrics
from .diff import step_samples
from .significance import Shift, compare_samples, compare_to_value

# metric -> (what, unit, statistic of the step time, True when a larger value is worse)
METRICS: dict[str, tuple[str, str, str, bool]] = {
    "step_p50": ("median step time", "ms", "p50", True),
    "step_p95": ("P95 step time", "ms", "p95", True),
    "step_p99": ("P99 step time", "ms", "p99", True),
    "step_mean": ("mean step time", "ms", "mean", True),
    "throughput": ("throughput (batch / mean step time)", "samples/s", "mean", False),
    "mem_peak": ("GPU memory peak", "GB", "", True),
}
DEFAULT_METRICS = ("step_p50",)


@dataclass
class Baseline:
    name: str
    samples: np.ndarray | None  # step times (ms) when the baseline is a profile
    values: dict[str, float | None]  # metric -> value, when it is a summary
    batch: int | None
    mem_peak_gb: float | None


@dataclass
class Verdict:
    metric: str
    what: str
    unit: str
    baseline: float | None
    value: float | None
    change_pct: float | None  # positive: worse
    limit_pct: float
    significant: bool
    regressed: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        def v(x: float | None) -> str:
            return "-" if x is None else f"{x:,.3f}"

        head = "REGRESSION" if self.regressed else "ok"
        if self.change_pct is None:
            change = ""
        elif self.change_pct == 0:
            change = f" (unchanged, limit {self.limit_pct:g}%)"
        else:
            change = (
                f" ({abs(self.change_pct):.1f}% {'worse' if self.change_pct > 0 else 'better'}, limit"
                f" {self.limit_pct:g}%)"
            )
        return (
            f"{head} {self.metric}: {self.what} {v(self.baseline)} -> {v(self.value)} {self.unit}{change}; {self.why}"
        )


def _mem_peak_gb(headline: list[dict[str, Any]]) -> float | None:
    vals = [d["mem_used"] for d in headline if d.get("mem_used") is not None]
    return max(vals) / 1e9 if vals else None


def from_profile(data: ProfileData, name: str) -> Baseline:
    return Baseline(name, step_samples(data), {}, data.meta.batch_size, _mem_peak_gb(gpu_metrics.headline(data)))


def from_summary(doc: Any, name: str) -> Baseline:
    """A baseline from ``dlscope summary --format json`` output (already parsed)."""
    steps = doc.get("steps") if isinstance(doc, dict) else None
    if not isinstance(steps, dict) or "p50_ms" not in steps:
        raise InputError(f"{name}: not a dlscope summary (write one with 'dlscope summary PROFILE --format json')")
    values: dict[str, float | None] = {f"step_{s}": steps.get(f"{s}_ms") for s in ("p50", "p95", "p99", "mean")}
    mean = steps.get("mean_ms")
    sps = steps.get("samples_per_s")
    batch = round(sps * mean / 1e3) if sps and mean else None
    gpu = doc.get("gpu") if isinstance(doc.get("gpu"), list) else []
    return Baseline(name, None, values, batch, _mem_peak_gb([g for g in gpu if isinstance(g, dict)]))


def _per_second(ms: float | None) -> float | None:
    """ms per sample -> samples per second (None for no time)."""
    return None if not ms else 1e3 / ms


def _throughput(base: Baseline, cur: np.ndarray, batch: int | None, limit: float) -> Verdict:
    what, unit = METRICS["throughput"][:2]
    if not batch or not base.batch:
        what, unit = "throughput (1 / mean step time; batch size not recorded on both sides)", "steps/s"
    bb, cb = (base.batch or 1, batch or 1) if (batch and base.batch) else (1, 1)
    if base.samples is not None:
        shift = compare_samples(base.samples / bb, cur / cb, "mean")
    else:
        mean = base.values.get("step_mean")
        if mean is None:
            return Verdict("throughput", what, unit, None, None, None, limit, False, False, "the baseline has no steps")
        shift = compare_to_value(mean / bb, cur / cb, "mean")
    ra, rb = _per_second(shift.a), _per_second(shift.b)
    change = None if not ra or rb is None else 100.0 * (ra - rb) / ra  # positive: throughput fell
    return _verdict("throughput", what, unit, ra, rb, change, limit, shift)


def _verdict(
    metric: str,
    what: str,
    unit: str,
    a: float | None,
    b: float | None,
    change: float | None,
    limit: float,
    shift: Shift | None,
) -> Verdict:
    sig = bool(shift and shift.significant)
    regressed = change is not None and change > limit and (sig or shift is None)
    why = shift.why if shift else "a single value on each side: no test, the limit alone decides"
    return Verdict(metric, what, unit, a, b, change, limit, sig, regressed, why)


def check(data: ProfileData, base: Baseline, metrics: list[str], limit_pct: float) -> list[Verdict]:
    """One verdict per metric of ``data`` against ``base``."""
    cur = step_samples(data)
    out = []
    for m in metrics:
        what, unit, stat, _ = METRICS[m]
        if m == "throughput":
            out.append(_throughput(base, cur, data.meta.batch_size, limit_pct))
            continue
        if m == "mem_peak":
            a, b = base.mem_peak_gb, _mem_peak_gb(gpu_metrics.headline(data))
            if a is None or b is None:
                out.append(
                    Verdict(
                        m,
                        what,
                        unit,
                        a,
                        b,
                        None,
                        limit_pct,
                        False,
                        False,
                        "no GPU memory samples on "
                        + (
                            "either side"
                            if a is None and b is None
                            else "the baseline"
                            if a is None
                            else "this profile"
                        ),
                    )
                )
                continue
            out.append(_verdict(m, what, unit, a, b, 100.0 * (b - a) / a if a else None, limit_pct, None))
            continue
        if not len(cur):
            out.append(
                Verdict(
                    m, what, unit, base.values.get(m), None, None, limit_pct, False, False, "this profile has no steps"
                )
            )
            continue
        if base.samples is not None:
            if not len(base.samples):
                out.append(
                    Verdict(m, what, unit, None, None, None, limit_pct, False, False, "the baseline has no steps")
                )
                continue
            shift = compare_samples(base.samples, cur, stat)
        else:
            value = base.values.get(m)
            if value is None:
                out.append(
                    Verdict(
                        m,
                        what,
                        unit,
                        None,
                        None,
                        None,
                        limit_pct,
                        False,
                        False,
                        "the baseline summary has no value for it",
                    )
                )
                continue
            shift = compare_to_value(value, cur, stat)
        out.append(_verdict(m, what, unit, shift.a, shift.b, shift.delta_pct, limit_pct, shift))
    return out
