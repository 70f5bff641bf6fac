"""``compare(a, b)``: what changed from profile A (before) to profile B (after).

Pure functions over two opened profiles, measured differences only: the diff use case
(``application.diff``) adds the comparison of the two profiles' advice. Renderers in
``render/diff_*`` only format the result.
Every per-name table is matched by name; kernels that vanished and kernels that are new are also
paired through the op that launched them (an fp32 GEMM and the bf16 one that replaced it are both
``aten::mm``'s), and what matched neither way is listed with its time, so that profiles from
different frameworks or compilers still say what could not be compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count
from ..core.headline import headline
from ..core.steps import THROUGHPUT_BASIS, step_stats, throughput
from ..reports import gpu_metrics
from ..reports.gpu_time_breakdown import REPORT as GPU_BREAKDOWN
from .decompose import Decomposition, decompose
from .significance import Shift, compare_samples
from .tables import Item, gpu_items, op_items, phase_items

STATS = ("p50", "p95", "p99", "mean")
TORCH_MEMORY = ("torch_allocated", "torch_reserved")  # bytes, from Kineto's [memory] events
COUNTER_METRICS = ("gpu_util", "sm_active", "tensor_active", "dram_bw_util", "power")
LOW_MATCH_PCT = 50.0  # below this share of GPU time matched by name, say that names differ


@dataclass
class Change:
    """One row of a diff: a name's value per step in A and B (None: absent there)."""

    kind: str
    name: str
    a: float | None
    b: float | None
    delta: float
    share_pct: float | None  # delta as a share of the total change of the mean step time
    status: str  # 'matched', 'new' (only in B), 'vanished' (only in A)
    count_a: float | None = None
    count_b: float | None = None
    op: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class OpLink:
    """Kernels that vanished and kernels that are new under the same launching op."""

    op: str
    vanished: list[tuple[str, float]]  # (kernel, ms per step in A)
    new: list[tuple[str, float]]  # (kernel, ms per step in B)
    a_ms: float
    b_ms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "a_ms": self.a_ms,
            "b_ms": self.b_ms,
            "vanished": [{"name": n, "ms": v} for n, v in self.vanished],
            "new": [{"name": n, "ms": v} for n, v in self.new],
        }


@dataclass
class MatchStats:
    table: str
    matched: int
    new: int
    vanished: int
    matched_a_pct: float | None  # share of A's time in names B also has
    matched_b_pct: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProfileDiff:
    a: str
    b: str
    steps_a: int
    steps_b: int
    shifts: list[Shift]
    throughput: dict[str, Any]
    total_delta_ms: float | None  # change of the mean step time; the explain rows sum to it
    explain: list[Change]
    decomposition_a: Decomposition
    decomposition_b: Decomposition
    phases: list[Change]
    ops: list[Change]
    ops_basis: str
    kernels: list[Change]
    op_links: list[OpLink]
    matching: list[MatchStats]
    gpu: dict[str, Any]
    memory: dict[str, Any]
    counters: list[dict[str, Any]]
    samples_a: list[float] = field(default_factory=list)  # step times (ms), for the HTML view
    samples_b: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def shift(self, stat: str) -> Shift | None:
        return next((s for s in self.shifts if s.stat == stat), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "steps_a": self.steps_a,
            "steps_b": self.steps_b,
            "step_time": [s.as_dict() for s in self.shifts],
            "throughput": self.throughput,
            "total_delta_ms": self.total_delta_ms,
            "explain": [c.as_dict() for c in self.explain],
            "decomposition": {"a": self.decomposition_a.as_dict(), "b": self.decomposition_b.as_dict()},
            "phases": [c.as_dict() for c in self.phases],
            "ops_basis": self.ops_basis,
            "ops": [c.as_dict() for c in self.ops],
            "kernels": [c.as_dict() for c in self.kernels],
            "op_links": [x.as_dict() for x in self.op_links],
            "matching": [m.as_dict() for m in self.matching],
            "gpu": self.gpu,
            "memory": self.memory,
            "counters": self.counters,
            "samples_ms": {"a": self.samples_a, "b": self.samples_b},
            "notes": self.notes,
        }


def step_samples(data: ProfileData) -> np.ndarray:
    """Durations (ms) of the statistics steps, every rank."""
    rows = data.con.execute("SELECT (end_ns - start_ns)::DOUBLE / 1e6 FROM stat_steps ORDER BY rank, step").fetchall()
    return np.array([r[0] for r in rows], dtype=float)


def _share(delta: float, total: float | None) -> float | None:
    return 100.0 * delta / total if total else None


def match(kind: str, a: dict[str, Item], b: dict[str, Item], total: float | None) -> list[Change]:
    """Rows for every name in A or B, largest absolute change first."""
    out = []
    for name in a.keys() | b.keys():
        ia, ib = a.get(name), b.get(name)
        va, vb = (ia.ms if ia else None), (ib.ms if ib else None)
        delta = (vb or 0.0) - (va or 0.0)
        status = "matched" if ia and ib else ("new" if ib else "vanished")
        out.append(
            Change(
                kind,
                name,
                va,
                vb,
                delta,
                _share(delta, total),
                status,
                ia.count if ia else None,
                ib.count if ib else None,
                (ib.op if ib and ib.op else (ia.op if ia else None)),
            )
        )
    out.sort(key=lambda c: (-abs(c.delta), c.name))
    return out


def match_stats(table: str, a: dict[str, Item], b: dict[str, Item]) -> MatchStats:
    both = a.keys() & b.keys()
    ta, tb = sum(i.ms for i in a.values()), sum(i.ms for i in b.values())
    return MatchStats(
        table,
        len(both),
        len(b.keys() - a.keys()),
        len(a.keys() - b.keys()),
        100.0 * sum(a[n].ms for n in both) / ta if ta else None,
        100.0 * sum(b[n].ms for n in both) / tb if tb else None,
    )


def op_links(kernels: list[Change]) -> list[OpLink]:
    """Vanished and new GPU work grouped by launching op, for ops that have both."""
    by_op: dict[str, OpLink] = {}
    for c in kernels:
        if c.status == "matched" or not c.op:
            continue
        link = by_op.setdefault(c.op, OpLink(c.op, [], [], 0.0, 0.0))
        if c.status == "vanished":
            link.vanished.append((c.name, c.a or 0.0))
            link.a_ms += c.a or 0.0
        else:
            link.new.append((c.name, c.b or 0.0))
            link.b_ms += c.b or 0.0
    links = [x for x in by_op.values() if x.vanished and x.new]
    return sorted(links, key=lambda x: -abs(x.b_ms - x.a_ms))


def explain(da: Decomposition, db: Decomposition) -> tuple[float | None, list[Change]]:
    """The change of the mean step time and its rows: one per part of either decomposition."""
    if da.mean_step_ms is None or db.mean_step_ms is None:
        return None, []
    total = db.mean_step_ms - da.mean_step_ms
    pa_, pb = {p.key: p for p in da.parts}, {p.key: p for p in db.parts}
    rows = []
    for key in pa_.keys() | pb.keys():
        x, y = pa_.get(key), pb.get(key)
        part = y or x
        assert part is not None  # the key came from one of the two
        delta = (y.ms if y else 0.0) - (x.ms if x else 0.0)
        status = "matched" if x and y else ("new" if y else "vanished")
        rows.append(
            Change(part.kind, part.name, x.ms if x else None, y.ms if y else None, delta, _share(delta, total), status)
        )
    # rounded: the two sides' sums are made in no fixed order, so a part that did not change can
    # differ by a few ulps, and those must not decide the order (it changed from run to run)
    rows.sort(key=lambda c: (-round(abs(c.delta), 9), c.name))
    return total, rows


def _throughput(data_a: ProfileData, data_b: ProfileData, sa: np.ndarray, sb: np.ndarray) -> dict[str, Any]:
    """Each side's throughput as summary, report and check give it (steps.THROUGHPUT_BASIS: from the
    mean step time; this used the median, so one profile showed two throughputs)."""
    ba, bb = data_a.meta.batch_size, data_b.meta.batch_size
    out: dict[str, Any] = {"batch_a": ba, "batch_b": bb}
    ma = float(np.mean(sa)) if len(sa) else None
    mb = float(np.mean(sb)) if len(sb) else None
    out["steps_per_s_a"], samples_a = throughput(ma, ba)
    out["steps_per_s_b"], samples_b = throughput(mb, bb)
    if ba and bb and samples_a and samples_b and ma and mb:
        out["samples_per_s_a"] = samples_a
        out["samples_per_s_b"] = samples_b
        out["ms_per_sample_a"] = ma / ba
        out["ms_per_sample_b"] = mb / bb
        out["ratio"] = samples_b / samples_a
        out["basis"] = THROUGHPUT_BASIS
        if ba != bb:  # the test check's throughput metric makes: the mean time per sample
            per_sample = compare_samples(sa / ba, sb / bb, "mean")
            out["per_sample"] = per_sample.as_dict()
    elif ma and mb:
        out["ratio"] = out["steps_per_s_b"] / out["steps_per_s_a"]
        out["basis"] = f"{THROUGHPUT_BASIS} (batch size not recorded on both sides)"
    return out


def _gpu(data: ProfileData) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    if not GPU_BREAKDOWN.missing(data):
        t = GPU_BREAKDOWN.compute(data).table
        n = gpu_step_count(data) or 1
        for c in ("span_ms", "compute_ms", "communication_ms", "memory_ms", "idle_ms"):
            if c in t.column_names:
                out[c] = sum(v or 0.0 for v in t.column(c).to_pylist()) / n
    h = headline(data)
    if h is not None:
        out.update(gpu_util_pct=h.gpu_util_pct, tensor_core_pct=h.tensor_core_pct)
    return out or None


def _gpu_pair(a: ProfileData, b: ProfileData) -> dict[str, Any]:
    ga, gb = _gpu(a), _gpu(b)
    keys = [
        k
        for k in (
            "gpu_util_pct",
            "tensor_core_pct",
            "compute_ms",
            "communication_ms",
            "memory_ms",
            "idle_ms",
            "span_ms",
        )
        if (ga and k in ga) or (gb and k in gb)
    ]
    return {
        "rows": [{"metric": k, "a": (ga or {}).get(k), "b": (gb or {}).get(k)} for k in keys],
        "per": "per step (ms); shares of the traced steps' wall time (%)",
    }


def _torch_memory(data: ProfileData) -> dict[str, float]:
    if not data.has("counters"):
        return {}
    names = ", ".join(f"'{m}'" for m in TORCH_MEMORY)
    return {
        r[0]: float(r[1])
        for r in data.con.execute(
            f"SELECT metric, max(value) FROM counters WHERE metric IN ({names}) AND coalesce(device, 0) >= 0 "
            "GROUP BY metric"
        ).fetchall()
    }


def _memory_and_counters(a: ProfileData, b: ProfileData) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    ha, hb = gpu_metrics.headline(a), gpu_metrics.headline(b)

    def peak(h: list[dict[str, Any]]) -> float | None:
        vals = [d["mem_used"] for d in h if d.get("mem_used") is not None]
        return max(vals) if vals else None

    def mean(h: list[dict[str, Any]], m: str) -> float | None:
        vals = [d[m] for d in h if d.get(m) is not None]
        return sum(vals) / len(vals) if vals else None

    memory: dict[str, Any] = {
        "peak_bytes_a": peak(ha),
        "peak_bytes_b": peak(hb),
        "source": "NVML device memory used, maximum",
    }
    # PyTorch's own allocator peaks, when the trace recorded memory events (profile_memory)
    ta, tb = _torch_memory(a), _torch_memory(b)
    memory["torch"] = [{"metric": m, "a": ta.get(m), "b": tb.get(m)} for m in TORCH_MEMORY if m in ta or m in tb]
    counters = [
        {"metric": m, "a": mean(ha, m), "b": mean(hb, m)}
        for m in COUNTER_METRICS
        if mean(ha, m) is not None or mean(hb, m) is not None
    ]
    return memory, counters


def compare(a: ProfileData, b: ProfileData, names: tuple[str, str] | None = None) -> ProfileDiff:
    """Compare profile ``a`` (before, the baseline) with ``b`` (after). ``names``: what to call
    them (default: their paths)."""
    sa, sb = step_samples(a), step_samples(b)
    shifts = [compare_samples(sa, sb, s) for s in STATS]
    da, db = decompose(a), decompose(b)
    total, rows = explain(da, db)
    pha, phb = phase_items(a), phase_items(b)
    (opa, basis_a), (opb, basis_b) = op_items(a), op_items(b)
    ops_basis = basis_a if basis_a == basis_b else "self_cpu"
    if basis_a != basis_b:  # one side without GPU work: compare CPU time on both
        opa = (
            {k: Item(v.name, v.extra if v.extra is not None else v.ms, v.count) for k, v in opa.items()}
            if basis_a == "self_gpu"
            else opa
        )
        opb = (
            {k: Item(v.name, v.extra if v.extra is not None else v.ms, v.count) for k, v in opb.items()}
            if basis_b == "self_gpu"
            else opb
        )
    ka, kb = gpu_items(a), gpu_items(b)
    kernels = match("gpu", ka, kb, total)
    memory, counters = _memory_and_counters(a, b)
    notes = _notes(a, b, sa, sb, da, db, ka, kb)
    matching = [match_stats("phases", pha, phb), match_stats("ops", opa, opb), match_stats("gpu", ka, kb)]
    for m in matching:
        if (
            m.matched_a_pct is not None
            and m.matched_b_pct is not None
            and min(m.matched_a_pct, m.matched_b_pct) < LOW_MATCH_PCT
        ):
            notes.append(
                f"{m.table}: only {m.matched_a_pct:.0f}% of A's and {m.matched_b_pct:.0f}% of B's time is in "
                "names both profiles have (a different framework, compiler or library?): "
                f"{m.vanished} name(s) only in A, {m.new} only in B"
                + ("; the step-time rows still add up" if total is not None else "")
            )
    return ProfileDiff(
        a=names[0] if names else str(a.path),
        b=names[1] if names else str(b.path),
        steps_a=len(sa),
        steps_b=len(sb),
        shifts=shifts,
        throughput=_throughput(a, b, sa, sb),
        total_delta_ms=total,
        explain=rows,
        decomposition_a=da,
        decomposition_b=db,
        phases=match("phase", pha, phb, total),
        ops=match("op", opa, opb, total),
        ops_basis=ops_basis,
        kernels=kernels,
        op_links=op_links(kernels),
        matching=matching,
        gpu=_gpu_pair(a, b),
        memory=memory,
        counters=counters,
        samples_a=[float(v) for v in sa],
        samples_b=[float(v) for v in sb],
        notes=notes,
    )


def _notes(
    a: ProfileData,
    b: ProfileData,
    sa: np.ndarray,
    sb: np.ndarray,
    da: Decomposition,
    db: Decomposition,
    ka: dict[str, Item],
    kb: dict[str, Item],
) -> list[str]:
    notes = []
    for tag, data, s, dec in (("A", a, sa, da), ("B", b, sb, db)):
        if not len(s):
            notes.append(
                f"{tag} has no steps: its values are totals over the whole profile (phases: per "
                "instance), with no step-time statistics or decomposition; --key-node NAME marks "
                "iterations by a range or op"
            )
        st = step_stats(data)
        if st.traced_excluded:
            notes.append(
                f"{tag}: step statistics leave out {len(st.traced_excluded)} step(s) slowed by detailed "
                "tracing; ops and kernels come from those traced steps"
            )
        if dec.idle_scale is not None:
            # tracing slows the host, not the GPU: say how the traced steps were set against the untraced ones
            notes.append(
                f"{tag}: the GPU busy rows are the traced steps' busy time per step; the idle rows split the "
                f"rest of the untraced mean step ({dec.mean_step_ms:,.3f} ms) as the traced steps' idle time "
                f"was split, scaled by {dec.idle_scale:.3f} (tracing slows the host, not the GPU)"
            )
    if da.basis != db.basis and "none" not in (da.basis, db.basis):
        notes.append(
            f"A is decomposed by {da.basis}, B by {db.basis} (one side has no GPU data): "
            "the rows cannot match, their sums still give each side's mean step time"
        )
    if bool(ka) != bool(kb):
        notes.append(f"only {'A' if ka else 'B'} has GPU activity")
    return notes
