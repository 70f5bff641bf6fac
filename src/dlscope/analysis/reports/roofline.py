"""roofline: per op name and input shapes, how close its GPU kernels came to what the GPU can do.

The work of each op comes from the performance model (:mod:`dlscope.analysis.models.op_cost`:
FLOPs and compulsory bytes from the recorded shapes, dtypes and argument values); what the GPU can
do, from its datasheet (:mod:`dlscope.analysis.core.hardware`); the time, from the op's kernels.

Which kernels are an op's: each kernel's launching op (by ``external_id``, the innermost op around
the launch) owns it if the model knows that op. Otherwise the nearest op around it that the model
knows owns it (an ``aten::embedding`` whose ``index_select`` lacks its dim), unless that op also
holds ops the model knows that launch kernels of their own (scaled-dot-product attention decomposed
into matrix products and a softmax): its count would include theirs, so the kernel stays unmodelled.
Kernels whose ops the model does not know are listed per launching op name with the reason (``why``),
never guessed.

Per row (op name, input shapes, dtypes and argument values, over the selected steps):

* ``calls``, ``kernels``, ``gpu_ms``: the op's calls and their kernels' summed time;
* ``flops``, ``bytes``: per call, from the model; ``tflops``, ``tbs``: achieved (per call, over its
  mean kernel time); ``intensity``: FLOPs per byte;
* ``peak``: the peak its precision is held to, with its TFLOP/s (fp32 matrix work on tensor-core kernels is TF32,
  otherwise CUDA-core FP32; elementwise work and norms the CUDA-core FP32 peak); ``ridge``: the
  intensity (FLOP/B) where that peak and the memory bandwidth meet; ``bound``: 'compute' when the
  intensity is at or above the ridge, else 'memory';
* ``peak_pct``: achieved over the roofline at the op's intensity: TFLOP/s over the compute peak when
  compute-bound, TB/s over the bandwidth when memory-bound (the time the roofline allows over the
  time taken);
* ``saving_ms_per_step``: the kernel time per step the op would give back if it ran at
  :data:`TARGET_PCT` percent of its roofline (0 where it already does).

The result also keeps the modelled rows as typed records (:class:`OpRoof`: the cost with a matrix
product's M, N, K, whether any kernel ran inside PyTorch's unfused attention, :data:`SDPA_MATH`)
for the ``below_roofline`` advice rule and the HTML report's chart.

The peaks need the GPU's name in the profile and that name in the datasheet table: otherwise the
FLOPs, bytes and achieved rates are shown without a roofline. Shapes are recorded only in
``--mode full`` (torch.profiler's ``record_shapes``); without them the report does not run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, selected_sql
from ..core.hardware import GpuPeaks, Lookup, lookup
from ..core.kernel_names import kernel_names
from ..core.report import Report, ReportResult, fixed, integer
from ..models.op_cost import OpCost, Unknown, op_cost, parse

# The share of its roofline (%) each op is assumed to reach for ``saving_ms_per_step``: well-tuned
# GEMMs and attention kernels reach 70-80% of the dense peak and bandwidth-bound kernels 70-90% of
# the datasheet bandwidth, so 70 is a target a good kernel meets, not the unreachable 100.
TARGET_PCT = 70.0

_MAX_DEPTH = 64  # ops nest far less deep; a damaged parent chain stops here
# the op PyTorch's scaled_dot_product_attention runs when no fused kernel (flash, memory-efficient,
# cuDNN) takes the inputs: the attention as matrix products and a softmax
# (aten/src/ATen/native/transformers/attention.cpp, _scaled_dot_product_attention_math)
SDPA_MATH = "aten::_scaled_dot_product_attention_math"


@dataclass(frozen=True)
class Gpu:
    """The profile's GPU for the roofline: its name and peaks, or why there are none."""

    name: str | None
    found: Lookup

    @property
    def peaks(self) -> GpuPeaks | None:
        return self.found.peaks


def profile_gpu(data: ProfileData) -> Gpu:
    """The one kind of GPU the profile ran on (every device of every rank); no peaks when the
    devices differ or the profile names none."""
    devs = [d for d in data.meta.devices if isinstance(d, dict) and isinstance(d.get("name"), str) and d["name"]]
    names = sorted({d["name"] for d in devs})
    if not names:
        return Gpu(None, lookup(None))
    if len(names) > 1:
        return Gpu(", ".join(names), Lookup(None, f"the profile's GPUs differ ({', '.join(names)})"))
    sms = sorted({d["sms"] for d in devs if isinstance(d.get("sms"), int) and not isinstance(d.get("sms"), bool)})
    return Gpu(names[0], lookup(names[0], sms[0] if len(sms) == 1 else None))


def _has_shapes(data: ProfileData) -> bool:
    return bool(data.scalar("SELECT EXISTS (SELECT 1 FROM raw_ops WHERE input_shapes_id IS NOT NULL)"))


def _precondition(data: ProfileData) -> str | None:
    if not _has_shapes(data):
        return (
            "the profile has no input shapes: they are recorded only in --mode full "
            "(dlscope profile --mode full, or torch.profiler's record_shapes=True)"
        )
    return None


def _tables(data: ProfileData) -> tuple[str, str]:
    """Temp tables: ``rl_launch`` (rank, op_id of each launching op, ns, kernels, tc_ns) and
    ``rl_chain`` (rank, launch_id, op_id, dist: each launching op and the ops around it, 0 = itself,
    with their name, shapes, types and values ids)."""
    launch = data.shared_table(
        "rl_launch",
        lambda: (
            f"""
        SELECT o.rank, o.op_id, sum(k.end_ns - k.start_ns)::BIGINT AS ns, count(*) AS kernels,
               coalesce(sum(k.end_ns - k.start_ns) FILTER (WHERE n.tensor_core), 0)::BIGINT AS tc_ns
        FROM ({selected_sql(data, "kernels", launched=True)}) k JOIN {kernel_names(data)} n ON n.name_id = k.name_id
        JOIN (SELECT rank, op_id, external_id FROM raw_ops WHERE external_id IS NOT NULL) o
          ON o.rank = k.rank AND o.external_id = k.external_id
        GROUP BY ALL"""
        ),
    )
    # each step joins the parent's own row, its names with it: no join back over every op at the end
    # (half of this query's time on the 504k-event GPT profile)
    chain = data.shared_table(
        "rl_chain",
        lambda: (
            f"""
        WITH RECURSIVE
            up(rank, launch_id, op_id, dist, parent_id, name_id, shapes_id, types_id, values_id) AS (
                SELECT o.rank, o.op_id, o.op_id, 0, o.parent_id, o.name_id, coalesce(o.input_shapes_id, -1),
                       coalesce(o.input_types_id, -1), coalesce(o.input_values_id, -1)
                FROM raw_ops o JOIN {launch} l ON l.rank = o.rank AND l.op_id = o.op_id
                UNION ALL
                SELECT u.rank, u.launch_id, p.op_id, u.dist + 1, p.parent_id, p.name_id,
                       coalesce(p.input_shapes_id, -1),
                       coalesce(p.input_types_id, -1), coalesce(p.input_values_id, -1)
                FROM up u JOIN raw_ops p ON p.rank = u.rank AND p.op_id = u.parent_id WHERE u.dist < {_MAX_DEPTH})
        SELECT rank, launch_id, op_id, dist, name_id, shapes_id, types_id, values_id FROM up"""
        ),
    )
    return launch, chain


@dataclass(frozen=True)
class _Key:
    name: str
    shapes: str | None
    types: str | None
    values: str | None


def _models(data: ProfileData, chain: str) -> tuple[list[_Key], list[OpCost | Unknown]]:
    """Each distinct (name, shapes, types, values) around a launch, its cost, and a temp table
    ``rl_model`` (name_id, shapes_id, types_id, values_id, key, modelled) to join on."""
    # the strings looked up for the distinct ids only (a few hundred), not for every op of every chain
    rows = data.con.execute(f"""
        SELECT c.name_id, c.shapes_id, c.types_id, c.values_id, n.value, s.value, t.value, v.value
        FROM (SELECT DISTINCT name_id, shapes_id, types_id, values_id FROM {chain}) c
        LEFT JOIN strings n ON n.id = c.name_id LEFT JOIN strings s ON s.id = c.shapes_id
        LEFT JOIN strings t ON t.id = c.types_id LEFT JOIN strings v ON v.id = c.values_id""").fetchall()
    keys = [_Key(r[4] or "", r[5], r[6], r[7]) for r in rows]
    costs: list[OpCost | Unknown] = [op_cost(k.name, parse(k.shapes, k.types, k.values)) for k in keys]
    table = pa.table(
        {
            "name_id": pa.array([r[0] for r in rows], pa.int32()),
            "shapes_id": pa.array([r[1] for r in rows], pa.int32()),
            "types_id": pa.array([r[2] for r in rows], pa.int32()),
            "values_id": pa.array([r[3] for r in rows], pa.int32()),
            "key": pa.array(range(len(rows)), pa.int32()),
            "modelled": pa.array([isinstance(c, OpCost) for c in costs], pa.bool_()),
        }
    )
    data.con.register("rl_model_arrow", table)
    try:
        data.con.execute("CREATE OR REPLACE TEMP TABLE rl_model AS SELECT * FROM rl_model_arrow")
    finally:
        data.con.unregister("rl_model_arrow")
    return keys, costs


@dataclass(frozen=True)
class Group:
    """Kernels of one row: a modelled key, or (``key`` of the launching op) an unmodelled one."""

    key: int
    calls: int
    kernels: int
    ns: int
    tc_ns: int
    sdpa_math: bool = False  # some of its kernels ran inside SDPA_MATH


def _groups(data: ProfileData, launch: str, chain: str) -> tuple[list[Group], list[Group]]:
    """Modelled groups (by the owning op's key) and unmodelled ones (by the launching op's key)."""
    cm = f"""SELECT c.rank, c.launch_id, c.op_id, c.dist, m.key, m.modelled FROM {chain} c
             JOIN rl_model m ON m.name_id = c.name_id AND m.shapes_id = c.shapes_id AND m.types_id = c.types_id
              AND m.values_id = c.values_id"""
    # owner: the launching op if the model knows it; else the nearest op around it that the model
    # knows, unless that op also holds a launching op the model knows (its count would include that
    # op's work, which has its own row)
    base = f"""
        WITH cm AS MATERIALIZED ({cm}),
            own AS (SELECT rank, launch_id, arg_min(op_id, dist) AS owner, arg_min(key, dist) AS okey,
                           min(dist) AS odist
                    FROM cm WHERE modelled GROUP BY ALL),
            held AS (SELECT DISTINCT c.rank, c.op_id FROM cm c
                     JOIN cm s ON s.rank = c.rank AND s.launch_id = c.launch_id AND s.dist = 0 AND s.modelled
                     WHERE c.dist > 0),
            assign AS (SELECT l.rank, l.op_id AS launch_id, l.ns, l.kernels, l.tc_ns,
                              CASE WHEN own.odist = 0 OR h.op_id IS NULL THEN own.owner END AS owner, own.okey,
                              h.op_id IS NOT NULL AND own.odist > 0 AS held
                       FROM {launch} l LEFT JOIN own ON own.rank = l.rank AND own.launch_id = l.op_id
                       LEFT JOIN held h ON h.rank = own.rank AND h.op_id = own.owner),
            self_key AS (SELECT rank, launch_id, key FROM cm WHERE dist = 0),
            in_math AS (SELECT DISTINCT c.rank, c.launch_id FROM {chain} c JOIN strings s ON s.id = c.name_id
                        WHERE c.dist > 0 AND s.value = '{SDPA_MATH}')"""
    # each launch with its owner, its own key and whether it ran inside SDPA's math path: made once
    # for both groupings below (the chain's joins are most of their time)
    data.con.execute(f"""CREATE OR REPLACE TEMP TABLE rl_assign AS {base}
        SELECT a.*, s.key AS self_key, m.launch_id IS NOT NULL AS in_math
        FROM assign a LEFT JOIN self_key s ON s.rank = a.rank AND s.launch_id = a.launch_id
        LEFT JOIN in_math m ON m.rank = a.rank AND m.launch_id = a.launch_id""")
    modelled = data.con.execute("""
        SELECT okey, count(DISTINCT (rank, owner)), sum(kernels)::BIGINT, sum(ns)::BIGINT,
               sum(tc_ns)::BIGINT, bool_or(in_math)
        FROM rl_assign WHERE owner IS NOT NULL GROUP BY okey""").fetchall()
    unmodelled = data.con.execute("""
        SELECT self_key, count(*), sum(kernels)::BIGINT, sum(ns)::BIGINT, sum(tc_ns)::BIGINT
        FROM rl_assign WHERE owner IS NULL AND self_key IS NOT NULL GROUP BY self_key""").fetchall()
    return (
        [Group(r[0], r[1], r[2], r[3], r[4], bool(r[5])) for r in modelled],
        [Group(r[0], r[1], r[2], r[3], r[4]) for r in unmodelled],
    )


@dataclass(frozen=True)
class OpRoof:
    """One modelled row of the table as typed figures (what the advice rule and the HTML chart read).
    ``ns`` and ``tc_ns`` are totals over the selected steps; rates per second; the roofline fields
    are None without the GPU's peaks (or without the peak of the op's precision)."""

    op: str
    input_shapes: str | None
    cost: OpCost  # per call
    calls: int
    ns: int
    tc_ns: int  # of which tensor-core kernels
    sdpa_math: bool  # launched inside SDPA_MATH: attention without a fused kernel
    tflops: float | None  # achieved
    intensity: float | None  # FLOP/byte
    peak_tflops: float | None = None  # the compute roof the op is held to
    peak_label: str | None = None
    peak_pct: float | None = None
    saving_ns_per_step: float | None = None  # kernel time above the target share of the roofline


@dataclass(frozen=True)
class Roofline:
    """The report's rows (``table``) with what its notes need."""

    table: pa.Table
    gpu: Gpu
    modelled_ns: int
    unmodelled_ns: int
    kernel_ns: int  # every selected kernel, linked to an op or not
    steps: int | None
    saving_ns: float  # per step
    over_100: int  # rows above 100% of their roofline
    unmodelled_names: list[tuple[str, int]]  # (name, ns), most time first
    values_recorded: bool
    ops: tuple[OpRoof, ...] = ()  # the modelled rows, in the table's order
    target_pct: float = TARGET_PCT


@dataclass
class _Row:
    """One row before its rates: the op, its shapes, the model's cost (None: unmodelled, ``why``)."""

    op: str
    shapes: str | None
    cost: OpCost | None
    why: str | None
    calls: int = 0
    kernels: int = 0
    ns: int = 0
    tc_ns: int = 0
    shapes_ns: int = -1  # time of the shapes shown (an unmodelled row shows its commonest)
    sdpa_math: bool = False

    def add(self, g: Group, shapes: str | None) -> None:
        self.calls += g.calls
        self.kernels += g.kernels
        self.ns += g.ns
        self.tc_ns += g.tc_ns
        self.sdpa_math = self.sdpa_math or g.sdpa_math
        if g.ns > self.shapes_ns:
            self.shapes, self.shapes_ns = shapes, g.ns


def _rows(
    keys: list[_Key], costs: list[OpCost | Unknown], modelled: list[Group], unmodelled: list[Group]
) -> list[_Row]:
    """Modelled groups merged where the cost is the same (argument values the model does not read,
    a learning rate, differ from step to step), unmodelled ones per op name and reason."""
    rows: dict[tuple[Any, ...], _Row] = {}
    for g in modelled:
        k, cost = keys[g.key], costs[g.key]
        assert isinstance(cost, OpCost)
        rows.setdefault(("m", k.name, k.shapes, cost), _Row(k.name, k.shapes, cost, None)).add(g, k.shapes)
    for g in unmodelled:
        k, cost = keys[g.key], costs[g.key]
        why = cost.reason if isinstance(cost, Unknown) else "no model"
        rows.setdefault(("u", k.name, why), _Row(k.name, None, None, why)).add(g, k.shapes)
    return sorted(rows.values(), key=lambda r: (-r.ns, r.op, r.shapes or "", r.cost.detail if r.cost else ""))


COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("op", pa.string()),
    ("input_shapes", pa.string()),
    ("dtype", pa.string()),
    ("calls", pa.int64()),
    ("kernels", pa.int64()),
    ("gpu_ms", pa.float64()),
    ("flops", pa.int64()),
    ("bytes", pa.int64()),
    ("tflops", pa.float64()),
    ("tbs", pa.float64()),
    ("intensity", pa.float64()),
    ("ridge", pa.float64()),
    ("bound", pa.string()),
    ("peak_pct", pa.float64()),
    ("saving_ms_per_step", pa.float64()),
    ("peak", pa.string()),
    ("detail", pa.string()),
    ("why", pa.string()),
)


def roofline(data: ProfileData, target_pct: float = TARGET_PCT) -> Roofline:
    """The roofline of the selected steps' ops (computed once per opened profile and target)."""
    result: Roofline = data.computed(_key(target_pct), lambda: _roofline(data, target_pct))
    return result


def prefetch(data: ProfileData, target_pct: float = TARGET_PCT) -> None:
    """Start computing :func:`roofline` in the background (:meth:`ProfileData.prefetch`), where
    the report can run: its queries then overlap the work done before it is read."""

    def make(worker: ProfileData) -> Roofline:
        if REPORT.missing(worker) is not None:
            raise LookupError("no roofline here: nothing takes it")
        return _roofline(worker, target_pct)

    data.prefetch(_key(target_pct), make)


def _key(target_pct: float) -> str:
    """The name the roofline is kept under in the opened profile (computed or prefetched)."""
    return f"roofline {target_pct}"


def _roofline(data: ProfileData, target_pct: float) -> Roofline:
    gpu = profile_gpu(data)
    launch, chain = _tables(data)
    keys, costs = _models(data, chain)
    modelled, unmodelled = _groups(data, launch, chain)
    steps = gpu_step_count(data)
    per_step = steps or 1
    peaks = gpu.peaks
    bw = peaks.hbm_tbs * 1e12 if peaks else None
    out: list[dict[str, Any]] = []
    saving_total = 0.0
    over = 0
    names: Counter[str] = Counter()
    ops: list[OpRoof] = []
    for r in _rows(keys, costs, modelled, unmodelled):
        row: dict[str, Any] = dict(
            op=r.op, input_shapes=r.shapes, calls=r.calls, kernels=r.kernels, gpu_ms=r.ns / 1e6, why=r.why
        )
        out.append(row)
        cost = r.cost
        if cost is None:
            names[r.op] += r.ns
            continue
        secs = r.ns / 1e9
        row.update(
            dtype=cost.dtype,
            detail=cost.detail or None,
            flops=cost.flops,
            bytes=cost.bytes,
            tflops=cost.flops * r.calls / secs / 1e12 if secs and cost.flops else None,
            tbs=cost.bytes * r.calls / secs / 1e12 if secs else None,
            intensity=cost.flops / cost.bytes if cost.bytes else None,
        )
        roof = OpRoof(r.op, r.shapes, cost, r.calls, r.ns, r.tc_ns, r.sdpa_math, row["tflops"], row["intensity"])
        if peaks is None or bw is None:
            ops.append(roof)
            continue
        # any tensor-core kernel: its matrix math runs there (layout transposes beside it do not)
        peak, label = peaks.compute_peak(cost.dtype, cost.matrix, r.tc_ns > 0)
        if peak is None and cost.flops:
            row.update(why=f"{peaks.name}'s datasheet gives no {label} peak")
            ops.append(roof)
            continue
        t_roof = max(cost.bytes / bw, cost.flops / (peak * 1e12) if peak else 0.0) * r.calls
        ridge = peak * 1e12 / bw if peak else None
        pct = 100.0 * t_roof / secs if secs else None
        saving = max(0.0, secs - t_roof / (target_pct / 100.0)) / per_step
        saving_total += saving
        over += int(pct is not None and pct > 100.0)
        intensity = row["intensity"] or 0.0
        row.update(
            peak=f"{label} {peak:g}" if peak else None,
            ridge=ridge,
            bound="compute" if ridge is not None and intensity >= ridge else "memory",
            peak_pct=pct,
            saving_ms_per_step=saving * 1e3,
        )
        ops.append(replace(roof, peak_tflops=peak, peak_label=label, peak_pct=pct, saving_ns_per_step=saving * 1e9))
    table = pa.table({c: pa.array([row.get(c) for row in out], t) for c, t in COLUMNS})
    kernel_ns = int(
        data.scalar(
            f"SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT FROM ({selected_sql(data, 'kernels', launched=True)})"
        )
        or 0
    )
    values = bool(data.scalar("SELECT EXISTS (SELECT 1 FROM raw_ops WHERE input_values_id IS NOT NULL)"))
    return Roofline(
        table,
        gpu,
        sum(g.ns for g in modelled),
        sum(g.ns for g in unmodelled),
        kernel_ns,
        steps,
        saving_total * 1e9,
        over,
        names.most_common(),
        values,
        tuple(ops),
        target_pct,
    )


def compute(data: ProfileData) -> ReportResult:
    r = roofline(data)
    table = r.table
    if r.gpu.peaks is None:
        table = table.drop_columns(["ridge", "bound", "peak_pct", "saving_ms_per_step", "peak"])
    return ReportResult("roofline", REPORT.title, table, FORMATS, _notes(r))


def _notes(r: Roofline) -> list[str]:
    notes: list[str] = []
    p = r.gpu.peaks
    if p is not None:
        notes.append(
            f"GPU: {r.gpu.name} = {p.name} ({p.source}): dense peaks at boost clock, memory {p.hbm_tbs:g} TB/s; "
            f"FP32 {p.fp32:g}"
            + "".join(
                f", {n} {v:g}"
                for n, v in (
                    ("TF32", p.tf32),
                    ("FP16", p.fp16),
                    ("BF16", p.bf16),
                    ("FP8", p.fp8),
                    ("INT8", p.int8),
                    ("FP32 matrix", p.fp32_matrix),
                    ("FP64", p.fp64),
                )
                if v
            )
            + " TFLOP/s"
        )
    else:
        notes.append(
            f"no roofline (peaks, ridge, bound, peak_pct, saving): {r.gpu.found.why_not}; FLOPs, bytes and "
            "achieved rates are shown without it"
        )
    if not r.kernel_ns:
        notes.append("no kernels in the selected steps")
        return notes
    share = 100.0 * r.modelled_ns / r.kernel_ns
    notes.append(
        f"the model covers {r.modelled_ns / 1e6:.3f} ms of {r.kernel_ns / 1e6:.3f} ms of kernel time ({share:.1f}%)"
    )
    if r.unmodelled_names:
        top = ", ".join(f"{n} ({ns / 1e6:.3f} ms)" for n, ns in r.unmodelled_names[:6])
        more = len(r.unmodelled_names) - 6
        notes.append(
            f"{len(r.unmodelled_names)} op name(s) without a model hold {r.unmodelled_ns / 1e6:.3f} ms "
            f"(why: see the rows): {top}" + (f" and {more} more" if more > 0 else "")
        )
    linked = r.modelled_ns + r.unmodelled_ns
    if r.kernel_ns > linked:
        notes.append(
            f"{(r.kernel_ns - linked) / 1e6:.3f} ms of kernel time has no launching op and is not in this table"
        )
    if not r.values_recorded:
        notes.append(
            "argument values (strides, causal flags, which gradients a backward computes) were not recorded "
            "in this profile (made before dlscope kept them: importing its trace again adds them): ops "
            "whose cost needs them are listed with the value they lack"
        )
    if p is not None:
        unit = "step" if r.steps else "profile (no steps)"
        notes.append(
            f"saving_ms_per_step: kernel time per {unit} given back if every modelled op ran at "
            f"{TARGET_PCT:g}% of its roofline: {r.saving_ns / 1e6:.3f} ms in all; the step shortens by "
            "as much only where GPU work is on its critical path"
        )
        if r.over_100:
            notes.append(
                f"{r.over_100} row(s) above 100% of the roofline: their data came from cache rather than "
                "device memory, or the model's compulsory bytes overcount what the kernels read"
            )
    notes.append(
        "flops and bytes are per call (bytes: each input read and each output written once); tflops and tbs "
        "are achieved over the kernels' time; intensity and ridge in FLOP/byte"
    )
    if r.steps:
        notes.append(f"gpu_ms: totals over {r.steps} selected step{'s' if r.steps != 1 else ''} with detailed tracing")
    return notes


def _si(v: Any) -> str:
    """4,096,000,000 -> '4.10G' (per-call FLOPs and bytes span a dozen orders of magnitude)."""
    if v is None:
        return ""
    x = float(v)
    for div, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:g}"


FORMATS = {
    "gpu_ms": fixed(3),
    "tflops": fixed(2),
    "tbs": fixed(3),
    "intensity": fixed(1),
    "ridge": fixed(1),
    "peak_pct": fixed(1),
    "saving_ms_per_step": fixed(3),
    "calls": integer(True),
    "kernels": integer(True),
    "flops": _si,
    "bytes": _si,
}

REPORT = Report(
    "roofline",
    "Roofline: each op's FLOPs and bytes against the GPU's peaks",
    compute,
    needs=("ops", "kernels"),
    precondition=_precondition,
    doc=(
        "per op name and input shapes: calls, kernel time, FLOPs and bytes from the shapes, achieved "
        "TFLOP/s and TB/s, intensity, the bound and ridge point, % of the roofline, and the time saved "
        f"at {TARGET_PCT:g}% of it (needs input shapes: --mode full)"
    ),
)
