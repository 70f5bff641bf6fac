"""Per-step tables of one profile that a diff matches by name: phases, ops, GPU work (kernels,
copies, sets), each from the report that owns it, plus the op that launched each kernel.

Everything is per step so that profiles of different lengths compare: phases as the phase
breakdown gives them (per statistics step), ops and GPU work summed over the selected steps that
hold detailed tracing and divided by their count (as ``op_sum`` and ``gpu_time_breakdown`` count
them). A profile without steps gives totals (one "step": the whole run).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql
from ..core.phases import phase_breakdown
from ..reports.op_sum import REPORT as OP_SUM


@dataclass
class Item:
    name: str
    ms: float  # per step: the quantity the diff ranks by (phase time, op self GPU or CPU time, GPU time)
    count: float | None = None  # calls or instances per step
    extra: float | None = None  # phases: GPU time launched inside; ops: self CPU time when ms is GPU time
    op: str | None = None  # GPU work: the op that launched it most often


def _per_step_divisor(data: ProfileData) -> int:
    n = gpu_step_count(data)
    return n if n else 1


def phase_items(data: ProfileData) -> dict[str, Item]:
    return {r.name: Item(r.name, r.mean_ms, r.count, r.gpu_ms) for r in phase_breakdown(data)}


def op_items(data: ProfileData) -> tuple[dict[str, Item], str]:
    """Ops by self GPU time when the profile has GPU work, else by self CPU time; and which."""
    if OP_SUM.missing(data):
        return {}, "none"
    t = OP_SUM.compute(data).table
    n = _per_step_divisor(data)
    has_gpu = "self_gpu_ms" in t.column_names
    out = {}
    for r in t.to_pylist():
        if has_gpu:
            out[r["name"]] = Item(
                r["name"], (r["self_gpu_ms"] or 0.0) / n, r["calls"] / n, (r["self_cpu_ms"] or 0.0) / n
            )
        else:
            out[r["name"]] = Item(r["name"], (r["self_cpu_ms"] or 0.0) / n, r["calls"] / n)
    return out, "self_gpu" if has_gpu else "self_cpu"


def gpu_items(data: ProfileData) -> dict[str, Item]:
    """Kernels, copies and sets of the selected steps by name, with their launching op."""
    work = gpu_work_sql(data)
    if work is None:
        return {}
    n = _per_step_divisor(data)
    link = (
        "LEFT JOIN (SELECT rank, external_id, any_value(name) AS op FROM ops WHERE external_id IS NOT NULL "
        "GROUP BY ALL) o ON o.rank = w.rank AND o.external_id = w.external_id"
        if data.has("ops")
        else ""
    )
    op = "mode(o.op ORDER BY o.op)" if link else "NULL"  # ordered: a fixed tie-break (see op_sum)
    rows = data.rows(f"""SELECT w.name, sum(w.end_ns - w.start_ns)::DOUBLE AS ns, count(*) AS n, {op} AS op
                         FROM ({work}) w {link} GROUP BY w.name""")
    return {r["name"]: Item(r["name"], r["ns"] / 1e6 / n, r["n"] / n, op=r["op"]) for r in rows}
