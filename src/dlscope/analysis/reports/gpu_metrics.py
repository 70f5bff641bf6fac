"""gpu_metrics: the sampled hardware counters per phase and per step (mean and max of each).

How a value is attributed: a sample belongs to every phase instance and step whose interval
holds its timestamp, and each statistic is the plain mean (and max) of those samples: a
*sample mean*, not time-weighted. The sampler reads at a fixed rate, so every sample stands for
the same amount of time and pooling them over all instances of a phase estimates the counter's
average over the time spent in that phase (the way a sampling profiler estimates time shares);
a time-weighted mean would add nothing but the smearing of each sample's window across phase
boundaries. A sample inside two overlapping instances of one phase (threads) counts once.

Where the timestamps sit: cheap NVML readings at the moment they were read (utilization is the
driver's own trailing average over its sample period); GPM metrics (SM and tensor activity,
DRAM, PCIe, NVLink) at the middle of the >= 100 ms window they average. A phase shorter than
that window reads partly its neighbours, and the report says which phases are that short.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...store.schema import METRICS
from ..core.context import ProfileData
from ..core.intervals import points_in_sql
from ..core.phases import EXCLUDED_DOMAINS
from ..core.report import Report, ReportResult, integer
from ..core.unavailable import counter_reasons

HEADLINE = ("gpu_util", "sm_active", "tensor_active", "dram_bw_util", "power", "mem_used")
GPM = ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util", "pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
_EXCLUDED_DOMAINS = "(" + ", ".join(f"'{d}'" for d in EXCLUDED_DOMAINS) + ")"  # as the phase breakdown


def _n_steps(data: ProfileData) -> int:
    return int(data.scalar("SELECT count(*) FROM sel_steps") or 0)


def _samples_sql() -> str:
    return "SELECT row_number() OVER () AS sid, device, metric, ts_ns, value FROM counters"


def compute(data: ProfileData) -> ReportResult:
    steps = _n_steps(data)
    in_steps = "JOIN sel_steps s ON p.rank = s.rank AND p.step = s.step" if steps else ""
    phases = f"""SELECT p.name, p.start_ns, p.end_ns FROM phases p {in_steps}
                 WHERE p.kind = 'range' AND coalesce(p.domain, '') NOT IN {_EXCLUDED_DOMAINS}"""
    if steps:
        overall = points_in_sql(
            "SELECT * FROM c",
            "SELECT start_ns, end_ns FROM sel_steps",
            "'steps' AS scope, 'selected steps' AS name, p.sid",
        )
    else:
        overall = "SELECT 'run' AS scope, 'whole run' AS name, c.sid FROM c"
    per_step = points_in_sql(
        "SELECT * FROM c",
        "SELECT step, start_ns, end_ns FROM sel_steps",
        "'step' AS scope, CAST(i.step AS VARCHAR) AS name, p.sid, i.step",
    )
    in_phase = points_in_sql("SELECT * FROM c", "SELECT * FROM ph", "'phase' AS scope, i.name, p.sid")
    table = data.table(f"""
        WITH c AS ({_samples_sql()}),
             ph AS ({phases}),
             order_ph AS (SELECT name, min(start_ns) AS first FROM ph GROUP BY name),
             hits AS (
                SELECT DISTINCT scope, name, sid, NULL::INTEGER AS step FROM ({overall})
                UNION ALL
                SELECT DISTINCT scope, name, sid, NULL::INTEGER AS step FROM ({in_phase})
                UNION ALL
                SELECT scope, name, sid, step FROM ({per_step})),
             agg AS (
                SELECT h.scope, h.name, h.step, c.device, c.metric, count(*)::BIGINT AS samples,
                       avg(c.value) AS mean, max(c.value) AS max
                FROM hits h JOIN c USING (sid) GROUP BY ALL)
        SELECT agg.* FROM agg LEFT JOIN order_ph o ON agg.scope = 'phase' AND o.name = agg.name
        ORDER BY CASE agg.scope WHEN 'phase' THEN 1 WHEN 'step' THEN 2 ELSE 0 END, o.first, agg.step, agg.name,
                 agg.device, agg.metric""")
    table = table.append_column(
        "unit", pa.array([METRICS.get(m, ("", ""))[0] for m in table.column("metric").to_pylist()], pa.string())
    )
    notes = [
        "mean and max over the samples taken inside each phase (all its instances pooled) and each step; "
        "GPM metrics are stamped at the middle of their >= 100 ms window"
    ]
    notes += _short_phase_notes(data, phases)
    notes += unavailable_notes(data)
    return ReportResult(
        "gpu_metrics", REPORT.title, table, {"mean": _num, "max": _num, "samples": integer(True)}, notes
    )


def _num(v: Any) -> str:
    if v is None:
        return ""
    v = float(v)
    return f"{v:,.1f}" if abs(v) < 1e6 else f"{v:.4g}"


def _short_phase_notes(data: ProfileData, phases_sql: str) -> list[str]:
    nvml = data.meta.collectors.get("nvml")
    window_ms = float((nvml.settings or {}).get("gpm_interval_ms", 100)) if nvml else 100.0
    rows = data.rows(f"""SELECT name, avg(end_ns - start_ns) / 1e6 AS ms FROM ({phases_sql})
                         GROUP BY name HAVING avg(end_ns - start_ns) / 1e6 < {window_ms} ORDER BY name""")
    if not rows or not data.scalar(f"SELECT count(*) FROM counters WHERE metric IN {GPM}"):
        return []
    names = ", ".join(f"{r['name']} ({r['ms']:.1f} ms)" for r in rows[:8])
    return [f"shorter than the {window_ms:.0f} ms GPM window, so their GPM values mix in neighbouring phases: {names}"]


def unavailable_notes(data: ProfileData) -> list[str]:
    """Which counters were not sampled, and why."""
    st = data.meta.collectors.get("nvml")
    if st is not None and st.status != "ok":
        return [f"no hardware counters: nvml {st.status}: {st.reason}"]
    by_reason: dict[str, list[str]] = {}
    for metric, reason in counter_reasons(data.meta).items():
        by_reason.setdefault(reason, []).append(metric)
    return [f"not available: {', '.join(ms)} ({reason})" for reason, ms in by_reason.items()]


def headline(data: ProfileData) -> list[dict[str, Any]]:
    """Per GPU, the mean of the headline counters over the selected steps (or the whole run) and
    the peak memory used. Empty when nothing was sampled."""
    if not data.has("counters"):
        return []
    steps = _n_steps(data)
    # per GPU: a sample that names no device (NULL: a source that did not say which, or a damaged
    # file's column) is nobody's headline
    src = f"SELECT device, metric, value, ts_ns FROM counters WHERE metric IN {HEADLINE} AND device IS NOT NULL"
    if steps:
        src = points_in_sql(src, "SELECT start_ns, end_ns FROM sel_steps", "p.device, p.metric, p.value")
    rows = data.rows(f"""
        SELECT c.device, c.metric, avg(c.value) AS mean, max(c.value) AS max, count(*)::BIGINT AS n
        FROM ({src}) c GROUP BY ALL ORDER BY 1, 2""")
    names = {int(d.get("index", -1)): d.get("name", "") for d in data.meta.devices if isinstance(d, dict)}
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        d = out.setdefault(
            int(r["device"]),
            {
                "device": int(r["device"]),
                "name": names.get(int(r["device"]), ""),
                "basis": "selected steps" if steps else "whole run",
                "samples": 0,
            },
        )
        d[r["metric"]] = r["max"] if r["metric"] == "mem_used" else r["mean"]
        d["samples"] = max(d["samples"], int(r["n"]))
    return list(out.values())


class _CounterReport(Report):
    def missing(self, data: ProfileData) -> str | None:
        if data.has("counters"):
            return None
        why = unavailable_notes(data)
        return why[0] if why and why[0].startswith("no hardware") else "no hardware counters were sampled"


REPORT = _CounterReport(
    "gpu_metrics",
    "GPU counters per phase and step",
    compute,
    doc="per phase and per step: mean and max of each sampled GPU counter (NVML, GPM)",
)
