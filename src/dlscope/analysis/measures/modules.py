"""The module view: GPU kernel time, kernels and host time per ``nn.Module``, forward and backward.

Where work is attributed (:func:`attribution`), from the ``module_calls`` the hooks recorded in
the traced steps (:mod:`dlscope.capture.module_calls`):

* a kernel by its launch (the runtime call with its correlation id: thread and time), an op by
  its start;
* backward: a launch or op inside a backward node of the autograd engine (an op
  ``autograd::engine::evaluate_function: XBackward0`` on its thread) belongs to the module whose
  forward op has that node's sequence number (``ops.sequence_nr``, per process), so backward time
  lands on the module whose forward made it; a node no forward op of a module has (gradient
  accumulation into ``.grad``) is backward outside modules. Where activation checkpointing runs a
  forward again inside a backward node, the module calls of that recompute hold their work (as
  backward: it is the backward's cost), and they count in no module's forward calls or host time;
* forward: else, the innermost module call open on its thread;
* else the optimizer (inside an ``optimizer`` hook phase or an ``Optimizer.*`` annotation of its
  thread), shown apart; else forward or backward outside modules (inside those hook phases:
  the backward phase of its process, whichever thread ran it), else other.

A module's figures include its descendants' (a path's subtree: the module called them); its host
time is the duration of its calls forward, and the time of the backward ops attributed to it
backward (each op's self time, so that nested ops count once).
Repeated blocks are aggregated by path pattern (:func:`block_patterns`): an all-digit segment
becomes ``*`` where every module at that place has the same class (``GPT.transformer.h.*.attn``:
twelve ``Block``), and stays where the indexes name different modules (a ``Sequential``'s
``Conv2d``, ``BatchNorm2d``, ``ReLU``). Figures are per step: totals over the selected steps that hold
module calls, divided by their number (per rank).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..core.context import ProfileData
from ..core.gpu_work import selected_sql
from ..core.innermost import innermost
from ..core.kernel_names import kernel_names
from . import measured

BACKWARD_NODE = "autograd::engine::evaluate_function:"
OPTIMIZER_ANNOTATION = "Optimizer.%"  # Optimizer.step#AdamW.step, Optimizer.zero_grad#...
FORWARD, BACKWARD, OPTIMIZER, OTHER = "forward", "backward", "optimizer", "other"
DIRECTIONS = (FORWARD, BACKWARD, OPTIMIZER, OTHER)
# the rows that are not modules (the report's part column)
PART_MODULE, PART_OPTIMIZER, PART_OUTSIDE = "module", "optimizer", "outside modules"
_DIGITS = re.compile(r"(?<=\.)\d+(?=\.|$)")


def pattern(path: str) -> str:
    """``path`` with all its all-digit segments as ``*``."""
    return _DIGITS.sub("*", path)


def block_patterns(paths: tuple[str, ...], types: tuple[str, ...]) -> list[str]:
    """Each path's pattern: an all-digit segment becomes ``*`` where all the modules whose paths
    differ from it only there (after the same pattern above) have one class; else it stays."""
    type_of = dict(zip(paths, types))
    prefixes = sorted({".".join(p.split(".")[:k]) for p in paths for k in range(1, p.count(".") + 2)}, key=_levels)
    pat: dict[str, str] = {}
    by_level: dict[int, list[str]] = {}
    for x in prefixes:
        by_level.setdefault(_levels(x), []).append(x)
    for level in sorted(by_level):
        # the classes of the numbered children of each parent pattern
        classes: dict[str, set[str]] = {}
        for x in by_level[level]:
            parent, _, seg = x.rpartition(".")
            if seg.isdigit():
                classes.setdefault(pat.get(parent, parent), set()).add(type_of.get(x, "?"))
        for x in by_level[level]:
            parent, _, seg = x.rpartition(".")
            head = pat.get(parent, parent)
            if not parent:
                pat[x] = x
            elif seg.isdigit() and len(classes[head]) == 1:
                pat[x] = f"{head}.*"
            else:
                pat[x] = f"{head}.{seg}"
    return [pat[p] for p in paths]


def _levels(path: str) -> int:
    return path.count(".")


@dataclass(frozen=True)
class Attributed:
    """Points (kernels or ops) with their direction and module path (-1: outside modules)."""

    direction: np.ndarray  # index into DIRECTIONS
    path: np.ndarray  # index into ModuleAttribution.paths, -1 outside modules
    dur_ns: np.ndarray


@dataclass(frozen=True)
class ModuleAttribution:
    paths: tuple[str, ...]  # exact paths of the selected steps' module calls
    types: tuple[str, ...]  # each path's class name
    depths: tuple[int, ...]  # each path's call depth
    first_ns: tuple[int, ...]  # each path's first call (tree order)
    calls: np.ndarray  # calls per path
    fwd_host_ns: np.ndarray  # summed call durations per path
    steps: int  # (rank, step) pairs with module calls
    kernels: Attributed | None  # the selected steps' kernels; None without kernels
    ops: Attributed  # the selected steps' ops, each with its self time (so nested ops count once)
    kernel_table: str | None  # temp table (rank, correlation_id, direction, path) of the kernels


def module_steps(data: ProfileData) -> str:
    """Name of a temp table (rank, step, start_ns, end_ns): the selected steps that hold module
    calls. Only these are measured: a selected step without the hooks (a traced step before they
    went in) would count its work as outside modules."""
    return data.shared_table(
        "module_steps",
        lambda: (
            """SELECT s.rank, s.step, s.start_ns, s.end_ns FROM sel_steps s
                   SEMI JOIN module_calls c ON c.rank = s.rank AND c.step = s.step"""
        ),
    )


def _in_module_steps(data: ProfileData, sql: str) -> str:
    """SQL: the rows of ``sql`` (with rank and step) in :func:`module_steps`."""
    return f"SELECT t_.* FROM ({sql}) t_ SEMI JOIN {module_steps(data)} m_ ON m_.rank = t_.rank AND m_.step = t_.step"


def _group(alias: str = "") -> str:
    """SQL: a BIGINT id of (rank, pid, tid): the intervals' and the points' common group."""
    p = f"{alias}." if alias else ""
    return f"(hash({p}rank, {p}pid, {p}tid) >> 1)::BIGINT"


def _arrays(data: ProfileData, sql: str) -> dict[str, np.ndarray]:
    return {k: np.ma.getdata(v) for k, v in data.con.execute(sql).fetchnumpy().items()}


@measured
def attribution(data: ProfileData) -> ModuleAttribution | None:
    """Each selected kernel and op (its self time) attributed to a direction and a module (see the
    module doc); None without module calls in the selected steps."""
    if not data.has("module_calls") or not data.step_count():
        return None
    calls = _arrays(
        data,
        f"""SELECT {_group("c")} AS g, c.rank, c.step, c.start_ns, c.end_ns, c.name, c.type, c.depth
            FROM ({selected_sql(data, "module_calls")}) c""",
    )
    if not len(calls["start_ns"]):
        return None
    paths, path_of_call = np.unique(calls["name"].astype(str), return_inverse=True)
    n = len(paths)
    type_of = dict(zip(path_of_call.tolist(), calls["type"].astype(str).tolist()))
    steps = len({(int(r), int(s)) for r, s in zip(calls["rank"], calls["step"])})
    has_ops = data.has("ops")
    nodes = _arrays(
        data,
        f"""SELECT {_group()} AS g, (hash(rank, pid) >> 1)::BIGINT AS gp, rank, start_ns, end_ns, sequence_nr
            FROM ops WHERE name LIKE '{BACKWARD_NODE}%'"""
        if has_ops
        else "SELECT 0::BIGINT AS g, 0::BIGINT AS gp, 0 AS rank, 0::BIGINT AS start_ns, 0::BIGINT AS end_ns, "
        "0::BIGINT AS sequence_nr WHERE FALSE",
    )
    node_path = _node_paths(data, nodes, calls, path_of_call) if has_ops else np.zeros(0, np.int64)
    # calls inside a backward node are a checkpoint's recompute: backward work, not forward calls
    forward_call = innermost(nodes["g"], nodes["start_ns"], nodes["end_ns"], calls["g"], calls["start_ns"]) < 0
    dur = np.where(forward_call, calls["end_ns"] - calls["start_ns"], 0)
    big = np.iinfo(np.int64).max
    first = np.full(n, big, np.int64)
    np.minimum.at(first, path_of_call, np.where(forward_call, calls["start_ns"], big))
    depth = np.full(n, big, np.int64)
    np.minimum.at(depth, path_of_call, np.where(forward_call, calls["depth"].astype(np.int64), big))
    # a path called only in a recompute (never in a forward pass) keeps its recompute's figures
    depth = np.where(depth == big, 0, depth)
    np.minimum.at(first, path_of_call, np.where(first[path_of_call] == big, calls["start_ns"], big))
    phases = _arrays(
        data,
        f"""SELECT {_group()} AS g, (hash(rank, pid) >> 1)::BIGINT AS gp, start_ns, end_ns,
                   CASE WHEN source = 'hook' AND name = 'backward' THEN 1
                        WHEN source = 'hook' AND name = 'forward' THEN 0 ELSE 2 END AS what
            FROM phases WHERE kind = 'range' AND (
              (source = 'hook' AND name IN ('forward', 'backward', 'optimizer'))
              OR name LIKE '{OPTIMIZER_ANNOTATION}')""",
    )

    def attribute(points: dict[str, np.ndarray]) -> Attributed:
        g, t = points["g"], points["t"]
        direction = np.full(len(t), DIRECTIONS.index(OTHER), np.int64)
        path = np.full(len(t), -1, np.int64)
        b = innermost(nodes["g"], nodes["start_ns"], nodes["end_ns"], g, t)
        in_node = b >= 0
        direction[in_node] = DIRECTIONS.index(BACKWARD)
        path[in_node] = node_path[b[in_node]]
        m = innermost(calls["g"], calls["start_ns"], calls["end_ns"], g, t)
        # a recompute: the module call lies inside the backward node
        again = in_node & (m >= 0)
        again[again] = calls["start_ns"][m[again]] >= nodes["start_ns"][b[again]]
        path[again] = path_of_call[m[again]]
        in_call = ~in_node & (m >= 0)
        direction[in_call] = DIRECTIONS.index(FORWARD)
        path[in_call] = path_of_call[m[in_call]]
        rest = ~in_node & ~in_call
        for what, key, name in ((2, "g", OPTIMIZER), (0, "g", FORWARD), (1, "gp", BACKWARD)):
            sel = phases["what"] == what
            hit = innermost(phases[key][sel], phases["start_ns"][sel], phases["end_ns"][sel], points[key], t) >= 0
            direction[rest & hit] = DIRECTIONS.index(name)
            rest &= ~hit
        return Attributed(direction, path, points["dur"])

    point_cols = f"{_group('p')} AS g, (hash(p.rank, p.pid) >> 1)::BIGINT AS gp"
    ops = attribute(
        _arrays(
            data,
            # every op with its self time: an op nested in another lands where it starts (a
            # checkpoint's recompute and its backward sit inside one outer backward node)
            f"""SELECT {point_cols}, p.start_ns AS t,
                       coalesce(p.self_ns, CASE WHEN coalesce(p.depth, 0) = 0 THEN p.end_ns - p.start_ns ELSE 0 END)
                         AS dur
                FROM ({_in_module_steps(data, selected_sql(data, "ops"))}) p"""
            if has_ops
            else "SELECT 0::BIGINT AS g, 0::BIGINT AS gp, 0::BIGINT AS t, 0::BIGINT AS dur WHERE FALSE",
        )
    )
    kernels, table = None, None
    if data.has("kernels") and data.has("api"):
        k = _arrays(
            data,
            f"""SELECT {point_cols}, p.start_ns AS t, k.end_ns - k.start_ns AS dur, k.rank, k.correlation_id
                FROM ({_in_module_steps(data, selected_sql(data, "kernels", launched=True))}) k
                JOIN (SELECT rank, correlation_id, any_value(pid) AS pid, any_value(tid) AS tid,
                             min(start_ns) AS start_ns
                      FROM api WHERE correlation_id IS NOT NULL GROUP BY ALL) p
                  ON p.rank = k.rank AND p.correlation_id = k.correlation_id""",
        )
        kernels = attribute(k)
        from ...store.nesting import register_table

        table = "module_kernels"
        register_table(
            data.con,
            table,
            {
                "rank": k["rank"].astype(np.int32),
                "correlation_id": k["correlation_id"].astype(np.int64),
                "direction": kernels.direction,
                "path": kernels.path,
            },
        )
    return ModuleAttribution(
        paths=tuple(paths.tolist()),
        types=tuple(type_of[i] for i in range(n)),
        depths=tuple(depth.tolist()),
        first_ns=tuple(first.tolist()),
        calls=np.bincount(path_of_call, weights=forward_call, minlength=n).astype(np.int64),
        fwd_host_ns=np.bincount(path_of_call, weights=dur, minlength=n).astype(np.int64),
        steps=steps,
        kernels=kernels,
        ops=ops,
        kernel_table=table,
    )


def _node_paths(
    data: ProfileData, nodes: dict[str, np.ndarray], calls: dict[str, np.ndarray], path_of_call: np.ndarray
) -> np.ndarray:
    """Each backward node's module path (-1: none): that of the forward op with its sequence
    number in its process (the outermost such op inside a module call of a forward pass or of a
    checkpoint's recompute)."""
    fwd = _arrays(
        data,
        f"""SELECT {_group()} AS g, (hash(rank, pid) >> 1)::BIGINT AS gp, start_ns, sequence_nr, depth FROM ops
            WHERE sequence_nr IS NOT NULL AND name NOT LIKE '{BACKWARD_NODE}%'""",
    )
    out = np.full(len(nodes["start_ns"]), -1, np.int64)
    if not len(fwd["start_ns"]) or not len(out):
        return out
    b = innermost(nodes["g"], nodes["start_ns"], nodes["end_ns"], fwd["g"], fwd["start_ns"])
    m = innermost(calls["g"], calls["start_ns"], calls["end_ns"], fwd["g"], fwd["start_ns"])
    # a forward op in a module call: outside any backward node, or in a recompute's call inside one
    # (a reentrant checkpoint backwards its recompute, whose nodes link to those ops)
    ok = m >= 0
    inside = ok & (b >= 0)
    ok[inside] = calls["start_ns"][m[inside]] >= nodes["start_ns"][b[inside]]
    # the outermost op of a sequence number wins: order by depth, keep the first per key
    order = np.argsort(fwd["depth"][ok], kind="stable")
    gp, seq, path = fwd["gp"][ok][order], fwd["sequence_nr"][ok][order], path_of_call[m[ok]][order]
    by_key: dict[tuple[int, int], int] = {}
    for key in zip(gp.tolist(), seq.tolist(), path.tolist()):
        by_key.setdefault((key[0], key[1]), key[2])
    for i, (gp_i, seq_i) in enumerate(zip(nodes["gp"].tolist(), nodes["sequence_nr"].tolist())):
        out[i] = by_key.get((gp_i, seq_i), -1)
    return out


@dataclass(frozen=True)
class ModuleRow:
    """One module path pattern (or a part outside modules), per step; a module's figures include
    its descendants'."""

    module: str
    part: str  # PART_MODULE, PART_OPTIMIZER or PART_OUTSIDE
    type: str
    depth: int
    instances: int  # exact paths aggregated (the repeated blocks)
    calls_per_step: float
    fwd_host_ms: float
    bwd_host_ms: float  # the backward ops' time attributed to it (their self times)
    fwd_gpu_ms: float | None
    fwd_kernels: float | None
    bwd_gpu_ms: float | None
    bwd_kernels: float | None
    fwd_ops_ms: float  # the ops' time inside its forward calls (at most fwd_host_ms: CPU work where no GPU)
    gpu_ms: float | None  # forward and backward; the optimizer's own for the optimizer's row
    kernels: float | None
    ops_ms: float


@dataclass(frozen=True)
class ModuleView:
    rows: tuple[ModuleRow, ...]
    steps: int
    gpu_coverage_pct: float | None  # forward and backward kernel time in modules
    ops_coverage_pct: float | None  # forward and backward op time in modules
    fwd_bwd_gpu_ms: float | None  # per step
    fwd_bwd_ops_ms: float


def _by_direction_and_path(att: Attributed, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(time, count) arrays of shape (directions, paths + 1): the last column is outside modules."""
    idx = att.direction * (n + 1) + np.where(att.path >= 0, att.path, n)
    size = len(DIRECTIONS) * (n + 1)
    t = np.bincount(idx, weights=att.dur_ns, minlength=size).reshape(len(DIRECTIONS), n + 1)
    c = np.bincount(idx, minlength=size).reshape(len(DIRECTIONS), n + 1)
    return t, c.astype(np.float64)


def _subtrees(paths: tuple[str, ...]) -> list[list[int]]:
    """Per path, the indexes of the paths in its subtree (itself included)."""
    index = {p: i for i, p in enumerate(paths)}
    members: list[list[int]] = [[] for _ in paths]
    for i, p in enumerate(paths):
        parts = p.split(".")
        for k in range(1, len(parts) + 1):
            j = index.get(".".join(parts[:k]))
            if j is not None:
                members[j].append(i)
    return members


@measured
def module_view(data: ProfileData) -> ModuleView | None:
    """Per path pattern, in tree order (the first call's), then the optimizer and the work
    outside modules; None without module calls."""
    att = attribution(data)
    if att is None:
        return None
    n, steps = len(att.paths), max(att.steps, 1)
    fw, bw, opt, other = (DIRECTIONS.index(d) for d in DIRECTIONS)
    ops_t, _ = _by_direction_and_path(att.ops, n)
    k_t, k_c = _by_direction_and_path(att.kernels, n) if att.kernels is not None else (None, None)
    subtree = _subtrees(att.paths)
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(block_patterns(att.paths, att.types)):
        groups.setdefault(p, []).append(i)
    ms = 1e6 * steps

    def incl(table: np.ndarray | None, d: int, members: list[int]) -> float | None:
        if table is None:
            return None
        return float(sum(table[d, subtree[i]].sum() for i in members))

    rows = []
    for pat, members in sorted(groups.items(), key=lambda kv: min(att.first_ns[i] for i in kv[1])):
        types = sorted({att.types[i] for i in members})
        kt_f, kt_b = incl(k_t, fw, members), incl(k_t, bw, members)
        kc_f, kc_b = incl(k_c, fw, members), incl(k_c, bw, members)
        rows.append(
            ModuleRow(
                module=pat,
                part=PART_MODULE,
                type="/".join(types),
                depth=min(att.depths[i] for i in members),
                instances=len(members),
                calls_per_step=float(att.calls[members].sum()) / steps,
                fwd_host_ms=float(att.fwd_host_ns[members].sum()) / ms,
                bwd_host_ms=(incl(ops_t, bw, members) or 0.0) / ms,
                fwd_gpu_ms=None if kt_f is None else kt_f / ms,
                fwd_kernels=None if kc_f is None else kc_f / steps,
                bwd_gpu_ms=None if kt_b is None else kt_b / ms,
                bwd_kernels=None if kc_b is None else kc_b / steps,
                fwd_ops_ms=(incl(ops_t, fw, members) or 0.0) / ms,
                gpu_ms=None if kt_f is None or kt_b is None else (kt_f + kt_b) / ms,
                kernels=None if kc_f is None or kc_b is None else (kc_f + kc_b) / steps,
                ops_ms=((incl(ops_t, fw, members) or 0.0) + (incl(ops_t, bw, members) or 0.0)) / ms,
            )
        )

    def apart(name: str, part: str, d_fwd: int | None, d_bwd: int | None, d_own: int | None = None) -> ModuleRow:
        """A row of work outside modules (the last column of the tables; the optimizer's, all of
        it: no module runs inside it)."""

        def t(table: np.ndarray | None, d: int | None, scale: float) -> float | None:
            if table is None:
                return None
            return 0.0 if d is None else float(table[d, n]) / scale

        def total(table: np.ndarray | None, scale: float) -> float | None:
            if table is None:
                return None
            if d_own is not None:
                return float(table[d_own].sum()) / scale
            return sum(float(table[d, n]) for d in (d_fwd, d_bwd) if d is not None) / scale

        return ModuleRow(
            module=name,
            part=part,
            type="",
            depth=0,
            instances=0,
            calls_per_step=0.0,
            fwd_host_ms=0.0,
            bwd_host_ms=t(ops_t, d_bwd, ms) or 0.0,
            fwd_gpu_ms=t(k_t, d_fwd, ms),
            fwd_kernels=t(k_c, d_fwd, steps),
            bwd_gpu_ms=t(k_t, d_bwd, ms),
            bwd_kernels=t(k_c, d_bwd, steps),
            fwd_ops_ms=t(ops_t, d_fwd, ms) or 0.0,
            gpu_ms=total(k_t, ms),
            kernels=total(k_c, steps),
            ops_ms=total(ops_t, ms) or 0.0,
        )

    rows.append(apart("(optimizer)", PART_OPTIMIZER, None, None, opt))
    rows.append(apart("(forward, outside modules)", PART_OUTSIDE, fw, None))
    rows.append(apart("(backward, outside modules)", PART_OUTSIDE, None, bw))
    gpu_total = None if k_t is None else float(k_t[[fw, bw]].sum())
    ops_total = float(ops_t[[fw, bw]].sum())
    return ModuleView(
        rows=tuple(rows),
        steps=att.steps,
        gpu_coverage_pct=(
            100.0 * float(k_t[[fw, bw], :n].sum()) / gpu_total if k_t is not None and gpu_total else None
        ),
        ops_coverage_pct=100.0 * float(ops_t[[fw, bw], :n].sum()) / ops_total if ops_total else None,
        fwd_bwd_gpu_ms=None if gpu_total is None else gpu_total / ms,
        fwd_bwd_ops_ms=ops_total / ms,
    )


@dataclass(frozen=True)
class ModuleShare:
    """A share of some kernels' time by module path pattern (the subtree's, descendants included)."""

    module: str
    pct: float
    ms_per_step: float


@dataclass(frozen=True)
class ModuleSplit:
    """Where some kernels' time sits among the modules: the patterns, largest share first, and
    the share attributed to any module at all."""

    shares: tuple[ModuleShare, ...]
    in_modules_pct: float
    total_ms_per_step: float


def kernel_split(data: ProfileData, where_sql: str) -> ModuleSplit | None:
    """The module split of the selected kernels for which ``where_sql`` (over ``k``, a kernel
    row with its ``kernel_names`` class columns: ``precision``, ``category``, ``tensor_core``)
    holds; None without module data or such kernels."""
    att = attribution(data)
    if att is None or att.kernel_table is None:
        return None
    rows = data.rows(f"""
        SELECT m.path, sum(k.end_ns - k.start_ns)::DOUBLE AS ns
        FROM (SELECT k.*, n.precision, n.category, n.tensor_core
              FROM ({_in_module_steps(data, selected_sql(data, "kernels", launched=True))}) k
              JOIN {kernel_names(data)} n ON n.name_id = k.name_id) k
        JOIN {att.kernel_table} m ON m.rank = k.rank AND m.correlation_id = k.correlation_id
        WHERE {where_sql} GROUP BY ALL""")
    total = sum(r["ns"] for r in rows)
    if not total:
        return None
    self_ns = np.zeros(len(att.paths))
    for r in rows:
        if r["path"] >= 0:
            self_ns[r["path"]] += r["ns"]
    subtree = _subtrees(att.paths)
    by_pattern: dict[str, float] = {}
    for i, p in enumerate(block_patterns(att.paths, att.types)):
        by_pattern[p] = by_pattern.get(p, 0.0) + float(self_ns[subtree[i]].sum())
    ms = 1e6 * max(att.steps, 1)
    shares = sorted(
        (ModuleShare(p, 100.0 * v / total, v / ms) for p, v in by_pattern.items() if v > 0),
        key=lambda s: (-s.pct, s.module),
    )
    return ModuleSplit(tuple(shares), 100.0 * float(self_ns.sum()) / total, total / ms)


@measured
def math_split(data: ProfileData, precisions: tuple[str, ...]) -> ModuleSplit | None:
    """Where the matrix math kernels of the given precision classes
    (:func:`~..core.math_kernels.precision_sql`: 'fp32', 'fp32_tc' ...) sit among the modules."""
    wanted = ", ".join(f"'{p}'" for p in precisions)
    return kernel_split(data, f"k.precision IN ({wanted})")
