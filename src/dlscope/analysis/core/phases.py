"""Phase breakdown: where each step's time goes, by application phase."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...store.nesting import create_nesting_table
from .context import ProfileData
from .phase_gpu import gpu_activity_sql

# Phases of these domains are left out of the breakdown: 'process' covers a whole program run;
# 'torch' marks PyTorch's own annotations (DataLoader, optimizer), shown as derived phases instead;
# 'trace' marks when detailed tracing ran.
EXCLUDED_DOMAINS = ("process", "torch", "trace")


@dataclass
class PhaseRow:
    """One phase name. With steps: instances that start in a statistics step (``stat_steps``),
    ``mean_ms`` per step and ``pct_of_step`` of those steps' total time; ``gpu_ms`` and
    ``kernels`` per traced step. Without steps: all instances, per instance, and ``pct_of_step``
    of the profile's wall time."""

    name: str
    count: int
    total_ms: float
    mean_ms: float
    pct_of_step: float | None
    depth: int
    source: str
    gpu_ms: float | None = None  # GPU time launched inside the phase, per step (None: no GPU data)
    kernels: float | None = None  # kernels launched inside the phase, per step
    # the GPU's span for the phase's work, per step, from the CUDA events at its boundaries
    # (phase_gpu): every statistics step, traced or not
    gpu_span_ms: float | None = None
    basis: str = "steps"  # 'steps': the statistics steps; 'traced': only traced steps have it; 'wall': no steps

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def phase_breakdown(data: ProfileData) -> list[PhaseRow]:
    rows = _breakdown(data)
    n_steps = int(data.scalar("SELECT count(*) FROM sel_steps") or 0)
    _add_gpu_spans(data, rows)
    excluded = ", ".join(f"'{d}'" for d in EXCLUDED_DOMAINS)
    sql = gpu_activity_sql(data, f"coalesce(domain, '') NOT IN ({excluded})")
    if sql is None:
        return rows
    # GPU activity exists only for steps that were traced: average over those
    if n_steps:
        gsteps = "detail_steps"
        n_gpu = int(data.scalar(f"SELECT count(*) FROM {gsteps}") or 0)
        in_steps = f"JOIN {gsteps} s ON g.rank = s.rank AND g.step = s.step"
    else:
        n_gpu, in_steps = 0, ""
    gpu = {
        r["name"]: r
        for r in data.rows(f"""
        SELECT g.name, sum(g.gpu_ns)::DOUBLE AS gpu_ns, sum(g.kernels)::DOUBLE AS kernels, count(*) AS n
        FROM ({sql}) g {in_steps} GROUP BY g.name""")
    }
    for r in rows:
        g = gpu.get(r.name)
        per = n_gpu if n_steps else (g["n"] if g else 1)
        r.gpu_ms = g["gpu_ns"] / 1e6 / per if g and per else 0.0
        r.kernels = g["kernels"] / per if g and per else 0.0
    return rows


def _add_gpu_spans(data: ProfileData, rows: list[PhaseRow]) -> None:
    """Each phase's GPU span per statistics step, where the profile has GPU phase marks."""
    if not data.has("phase_gpu"):
        return
    n = int(data.scalar("SELECT count(*) FROM stat_steps") or 0)
    if not n:
        return
    spans = dict(
        data.con.execute("""
        SELECT g.name, sum(g.gpu_end_ns - g.gpu_start_ns)::DOUBLE FROM phase_gpu g
        JOIN stat_steps s ON g.rank = s.rank AND g.step = s.step GROUP BY g.name""").fetchall()
    )
    for r in rows:
        if r.name in spans and r.source == "hook":
            r.gpu_span_ms = spans[r.name] / 1e6 / n


def shown_phases_sql(data: ProfileData) -> str:
    """SQL of the phase ranges that breakdowns show (EXCLUDED_DOMAINS left out), with ``depth``
    recomputed among them: a hidden torch annotation under a derived phase of the same span must
    not push it a level down. Used by the breakdown, the per-step phases and the report's shading."""
    excluded = ", ".join(f"'{d}'" for d in EXCLUDED_DOMAINS)
    # made once per opened profile: the breakdown, the per-step split, the report's bands and
    # half a dozen rules read it, and the nesting costs a sort of every phase (300k in a 10-minute run)
    shown = data.shared_table(
        "shown_phases_in",
        lambda: (
            f"""SELECT row_number() OVER () AS rid, *
        FROM phases WHERE kind = 'range' AND coalesce(domain, '') NOT IN ({excluded})"""
        ),
    )
    nested = data.shared_table(
        "shown_phases",
        lambda: (
            f"""SELECT p.* REPLACE (n.depth AS depth) FROM {shown} p
               JOIN {create_nesting_table(data.con, shown, ("rank", "pid", "tid"), shown + "_nesting")} n USING (rid)"""
        ),
    )
    return f"SELECT * FROM {nested}"


def _per_step(data: ProfileData, base: str, steps: str, basis: str, skip: set[str]) -> list[tuple[float, PhaseRow]]:
    """(mean offset in the step, row) for each phase name found in the steps of ``steps``."""
    n_steps = int(data.scalar(f"SELECT count(*) FROM {steps}") or 0)
    if not n_steps:
        return []
    step_total = float(data.scalar(f"SELECT sum(end_ns - start_ns)::DOUBLE FROM {steps}") or 0)
    rows = data.rows(f"""
        SELECT p.name, count(*) AS n, sum(p.end_ns - p.start_ns)::DOUBLE AS total, min(p.depth) AS depth,
               any_value(p.source) AS source, avg(p.start_ns - s.start_ns) AS off_ns
        FROM ({base}) p JOIN {steps} s ON p.rank = s.rank AND p.step = s.step
        GROUP BY p.name""")
    return [
        (
            r["off_ns"],
            PhaseRow(
                r["name"],
                int(r["n"]),
                r["total"] / 1e6,
                r["total"] / 1e6 / n_steps,
                100.0 * r["total"] / step_total if step_total else None,
                int(r["depth"] or 0),
                r["source"],
                basis=basis,
            ),
        )
        for r in rows
        if r["name"] not in skip
    ]


def _tree_order(data: ProfileData, base: str, rows: list[tuple[float, PhaseRow]]) -> list[PhaseRow]:
    """Rows in the order a reader expects: top-level phases by where they start in the step,
    each followed by the phases it encloses (its most frequent parent), recursively. Ordering by
    mean offset alone breaks when phases are measured over different sets of steps."""
    parents = {
        r["name"]: r["parent"]
        for r in data.rows(f"""
        WITH p AS ({base})
        SELECT c.name, mode(par.name ORDER BY par.name) AS parent FROM p c JOIN p par
          ON par.rank = c.rank AND par.pid = c.pid AND par.tid = c.tid AND par.depth = c.depth - 1
         AND par.start_ns <= c.start_ns AND par.end_ns >= c.end_ns
        WHERE c.depth > 0 GROUP BY c.name""")
    }
    by_name = {r.name: (off, r) for off, r in rows}
    children: dict[str | None, list[str]] = {}
    for name in by_name:
        parent = parents.get(name)
        children.setdefault(parent if parent in by_name and parent != name else None, []).append(name)
    out: list[PhaseRow] = []
    seen: set[str] = set()

    def visit(parent: str | None, depth: int) -> None:
        for name in sorted(children.get(parent, []), key=lambda n: (by_name[n][0], n)):
            if name in seen:
                continue
            seen.add(name)
            row = by_name[name][1]
            row.depth = depth
            out.append(row)
            visit(name, depth + 1)

    visit(None, 0)
    out += [r for _, r in rows if r.name not in seen]  # cycles (a name nested in itself elsewhere)
    return out


def _breakdown(data: ProfileData) -> list[PhaseRow]:
    n_steps = int(data.scalar("SELECT count(*) FROM stat_steps") or 0)
    base = shown_phases_sql(data)
    if n_steps:
        rows = _per_step(data, base, "stat_steps", "steps", set())
        if data.traced_excluded:
            # phases that exist only while tracing ran (derived from the PyTorch trace: forward,
            # backward ...) are measured over the traced steps, and said to be
            rows += _per_step(
                data, base, "(SELECT * FROM detail_steps WHERE traced)", "traced", {r.name for _, r in rows}
            )
        return _tree_order(data, base, rows)
    wall = wall_ns(data)
    wall_rows = data.rows(f"""
        SELECT name, count(*) AS n, sum(end_ns - start_ns)::DOUBLE AS total, min(depth) AS depth,
               any_value(source) AS source, min(start_ns) AS first
        FROM ({base}) GROUP BY name ORDER BY first, name""")
    return [
        PhaseRow(
            r["name"],
            int(r["n"]),
            r["total"] / 1e6,
            r["total"] / 1e6 / r["n"],
            100.0 * r["total"] / wall if wall else None,
            int(r["depth"] or 0),
            r["source"],
            basis="wall",
        )
        for r in wall_rows
    ]


def wall_ns(data: ProfileData) -> int:
    """The profile's wall time: meta's start/end when recorded, else the span of its events."""
    m = data.meta
    if m.start_ns and m.end_ns and m.end_ns > m.start_ns:
        return int(m.end_ns - m.start_ns)
    span = data.rows("""
        SELECT min(s) AS s, max(e) AS e FROM (
          SELECT min(start_ns) s, max(end_ns) e FROM phases UNION ALL
          SELECT min(start_ns), max(end_ns) FROM ops UNION ALL
          SELECT min(start_ns), max(end_ns) FROM api UNION ALL
          SELECT min(start_ns), max(end_ns) FROM kernels UNION ALL
          SELECT min(start_ns), max(end_ns) FROM memcpy)""")[0]
    return int(span["e"] - span["s"]) if span["s"] is not None else 0
