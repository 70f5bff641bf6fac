"""fsdp_units: per FSDP-sharded unit, the all-gather it waits for and how much of it is exposed.

FSDP (FSDP2's ``fully_shard`` and FSDP1 alike) gathers each unit's parameters before the unit's
forward (and again before its backward when it resharded after forward), and reduce-scatters its
gradients after its backward. PyTorch annotates the host side: ``FSDP::all_gather (blocks.3)``
launches the unit's all-gather kernel. A gather is **exposed** where no compute kernel of the rank
ran while it did: the compute stream waited for the parameters (prefetch too late or too small).
The **reduce-scatter tail** is the reduce-scatter time after the rank's last compute kernel of the
step: the step's end waits for it.

Per rank and unit (and pass: forward or backward, from dlscope's hook phases), per traced step:
the gathers, their GPU time, the exposed part and its share; a final row per rank, ``(reduce-
scatter tail)``, holds the tail. Exposure is measured on the traced steps' kernels, which the
tracer does not slow (GPU time), against the union of the rank's compute kernels.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa

from ..core import interval_arrays as ia
from ..core.context import ProfileData
from ..core.gpu_work import gpu_work_sql
from ..core.report import Report, ReportResult, fixed, integer

UNIT_RE = re.compile(r"^FSDP::all_gather(?: \((?P<unit>.*)\))?$")
TAIL = "(reduce-scatter tail)"


def _rows(data: ProfileData) -> dict[str, np.ndarray]:
    gpu = gpu_work_sql(data)
    return data.con.execute(f"""
        WITH g AS ({gpu}),
             ag AS (SELECT g.rank, g.step, g.start_ns, g.end_ns, a.start_ns AS launch_ns, a.pid
                    FROM g JOIN api a ON a.rank = g.rank AND a.correlation_id = g.correlation_id
                    WHERE g.category = 'communication' AND lower(g.name) LIKE '%allgather%')
        SELECT ag.rank, ag.step, ag.start_ns, ag.end_ns, ag.launch_ns,
               (SELECT p.name FROM phases p WHERE p.rank = ag.rank AND p.name LIKE 'FSDP::all_gather%'
                  AND p.name NOT LIKE 'FSDP::all_gather_copy%'
                  AND p.start_ns <= ag.launch_ns AND ag.launch_ns < p.end_ns ORDER BY p.start_ns DESC LIMIT 1) AS unit
        FROM ag ORDER BY ag.rank, ag.start_ns""").fetchnumpy()


def _islands(data: ProfileData, where: str) -> dict[str, np.ndarray]:
    gpu = gpu_work_sql(data)
    return ia.union(data.con.execute(f"SELECT rank, start_ns, end_ns FROM ({gpu}) WHERE {where}").fetchnumpy())


def compute_islands(data: ProfileData) -> dict[str, np.ndarray]:
    """The union of each rank's compute kernels (the time its compute stream ran)."""
    return _islands(data, "category = 'compute'")


def _phase_islands(data: ProfileData, name: str) -> dict[str, np.ndarray]:
    return ia.union(
        data.con.execute(
            f"SELECT rank, start_ns, end_ns FROM phases WHERE name = '{name}' AND source = 'hook'"
        ).fetchnumpy()
    )


def _unit_name(annotation: str | None) -> str:
    """The unit an all-gather's annotation names ("(root)" for the root's own, unannotated: none)."""
    if annotation is None:
        return "(unannotated)"
    m = UNIT_RE.match(annotation)
    return (m.group("unit") or "(root)") if m else annotation


def compute(data: ProfileData) -> ReportResult:
    rows = _rows(data)
    empty = pa.table({"rank": pa.array([], pa.int32())})
    if not len(rows["rank"]):
        return ReportResult(
            "fsdp_units", REPORT.title, empty, FORMATS, ["no FSDP all-gather kernels in the traced steps"]
        )
    rank = rows["rank"].astype(np.int64)
    s, e = rows["start_ns"].astype(np.int64), rows["end_ns"].astype(np.int64)
    compute_isl = compute_islands(data)
    exposed = (e - s) - ia.covered(rank, s, e, compute_isl)
    launch = rows["launch_ns"].astype(np.int64)
    bw = ia.covered(rank, launch, launch + 1, _phase_islands(data, "backward")) > 0
    units = [_unit_name(u) for u in rows["unit"].tolist()]
    steps = {
        r: len({st for rr, st in zip(rank.tolist(), rows["step"].tolist()) if rr == r and st is not None}) or 1
        for r in set(rank.tolist())
    }
    groups: dict[tuple[int, str, str], list[int]] = {}
    for i, key in enumerate(zip(rank.tolist(), units, np.where(bw, "backward", "forward").tolist())):
        groups.setdefault(key, []).append(i)
    out: dict[str, list[Any]] = {
        "rank": [],
        "unit": [],
        "pass": [],
        "gathers_per_step": [],
        "gather_ms_per_step": [],
        "exposed_ms_per_step": [],
        "exposed_pct": [],
    }
    for (r, unit, p), idx in sorted(groups.items(), key=lambda kv: (kv[0][0], min(s[kv[1]]))):
        n = steps[r]
        dur, exp = float((e[idx] - s[idx]).sum()), float(exposed[idx].sum())
        out["rank"].append(r)
        out["unit"].append(unit)
        out["pass"].append(p)
        out["gathers_per_step"].append(len(idx) / n)
        out["gather_ms_per_step"].append(dur / 1e6 / n)
        out["exposed_ms_per_step"].append(exp / 1e6 / n)
        out["exposed_pct"].append(100 * exp / dur if dur else 0.0)
    for r, tail in sorted(_tails(data).items()):
        n = steps.get(r, 1)
        out["rank"].append(r)
        out["unit"].append(TAIL)
        out["pass"].append("backward")
        out["gathers_per_step"].append(None)
        out["gather_ms_per_step"].append(None)
        out["exposed_ms_per_step"].append(tail / 1e6 / n)
        out["exposed_pct"].append(None)
    table = pa.table(
        {
            "rank": pa.array(out["rank"], pa.int32()),
            "unit": out["unit"],
            "pass": out["pass"],
            "gathers_per_step": pa.array(out["gathers_per_step"], pa.float64()),
            "gather_ms_per_step": pa.array(out["gather_ms_per_step"], pa.float64()),
            "exposed_ms_per_step": out["exposed_ms_per_step"],
            "exposed_pct": pa.array(out["exposed_pct"], pa.float64()),
        }
    )
    return ReportResult("fsdp_units", REPORT.title, table, FORMATS)


def _tails(data: ProfileData) -> dict[int, int]:
    """Per rank, over the traced steps: reduce-scatter time after the step's last compute kernel."""
    got = data.con.execute(f"""
        WITH g AS ({gpu_work_sql(data)}),
             last AS (SELECT rank, step, max(end_ns) AS last_compute FROM g WHERE category = 'compute' GROUP BY ALL)
        SELECT g.rank, sum(greatest(g.end_ns - greatest(g.start_ns, l.last_compute), 0))::BIGINT
        FROM g JOIN last l USING (rank, step)
        WHERE g.category = 'communication' AND lower(g.name) LIKE '%reducescatter%' GROUP BY g.rank""").fetchall()
    return {int(r): int(v) for r, v in got}


FORMATS = {
    "gathers_per_step": fixed(1),
    "gather_ms_per_step": fixed(3),
    "exposed_ms_per_step": fixed(3),
    "exposed_pct": fixed(1),
    "rank": integer(),
}


def _why_not(data: ProfileData) -> str | None:
    if not data.scalar("SELECT count(*) FROM (SELECT 1 FROM phases WHERE name LIKE 'FSDP::all_gather%' LIMIT 1)"):
        return "no FSDP all-gather was recorded (not an FSDP job, or no traced step)"
    return None


REPORT = Report(
    "fsdp_units",
    "FSDP: per sharded unit, the all-gather each waits for and how much is exposed",
    compute,
    needs=("kernels", "api", "phases"),
    precondition=_why_not,
)
