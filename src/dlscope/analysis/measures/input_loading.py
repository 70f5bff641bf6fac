"""Data loading in the main process: its phases (named by :data:`..core.host_state.DATA_LOADING_RE`),
their time per step by name and how much of it ran outside framework ops, the loading time per
timed step with overlaps counted once, per GPU window, and the host-to-device copies issued inside
it by source memory."""

from __future__ import annotations

from dataclasses import dataclass

from ..core.context import ProfileData
from ..core.host_state import DATA_LOADING_RE, main_pid_sql
from ..core.intervals import covered_sql, union_sql
from . import measured
from .basis import basis, gpu_windows_table, in_gpu_windows


@dataclass(frozen=True)
class LoadingPhase:
    """One data-loading phase name."""

    phase: str
    ms_per_step: float  # per timed step (per GPU window in the traced fallback, per window without steps)
    steps: list[int]
    op_covered: tuple[float, float] | None  # (its ns, of them inside framework ops) in the traced steps


def input_phases_sql(data: ProfileData) -> str:
    """SQL: the data-loading phase ranges of the main process: rank, step, name, start_ns, end_ns."""
    return f"""SELECT p.rank, p.step, p.name, p.start_ns, p.end_ns
               FROM phases p LEFT JOIN ({main_pid_sql(data)}) m USING (rank)
               WHERE p.kind = 'range' AND coalesce(p.domain, '') NOT IN ('process', 'trace')
                 AND (m.pid IS NULL OR p.pid IS NULL OR p.pid = m.pid)
                 AND regexp_matches(lower(p.name), '{DATA_LOADING_RE}')"""


@measured
def loading_recorded(data: ProfileData) -> bool:
    """Whether the main process recorded any data-loading phase."""
    return bool(data.scalar(f"SELECT count(*) FROM ({input_phases_sql(data)})"))


@measured
def loading_phases(data: ProfileData) -> tuple[LoadingPhase, ...]:
    """Per data-loading phase name, its time per timed step (or per instance without steps) and the
    steps it ran in, largest first; and how much of it ran inside framework ops (traced steps)."""
    b = basis(data)
    if b.has_steps:
        src = (
            f"SELECT i.* FROM ({input_phases_sql(data)}) i SEMI JOIN stat_steps s ON s.rank = i.rank AND s.step ="
            " i.step"
        )
        n = b.stat_steps
    else:
        src, n = input_phases_sql(data), max(b.windows, 1)
    sql = """
        WITH i AS MATERIALIZED ({src})
        SELECT name AS phase, sum(end_ns - start_ns)::DOUBLE / 1e6 / {n} AS ms_per_step,
               list(DISTINCT step ORDER BY step) AS step_list,
               sum(end_ns - start_ns)::DOUBLE AS total_ns
        FROM i GROUP BY name ORDER BY ms_per_step DESC, name"""
    rows = data.rows(sql.format(src=src, n=n))
    if not rows and b.has_steps and b.windows:
        # phases derived from the framework's trace exist only in the traced steps (sampled detail)
        rows = data.rows(
            sql.format(src=f"SELECT i.* FROM ({input_phases_sql(data)}) i {in_gpu_windows(data, 'i')}", n=b.windows)
        )
    # how much of each phase ran inside framework ops: only in traced steps, where ops exist
    cover: dict[str, tuple[float, float]] = {}
    if data.has("ops"):
        ops = "SELECT rank, start_ns, end_ns FROM raw_ops WHERE coalesce(depth, 0) = 0"
        inside = covered_sql(
            f"SELECT i.* FROM ({input_phases_sql(data)}) i {in_gpu_windows(data, 'i')}",
            union_sql(ops, "rank"),
            ("rank",),
        )
        cover = {
            r["phase"]: (r["ns"], r["op_ns"])
            for r in data.rows(f"""
            SELECT name AS phase, sum(end_ns - start_ns)::DOUBLE AS ns, sum(covered_ns)::DOUBLE AS op_ns
            FROM ({inside}) GROUP BY name""")
        }
    return tuple(LoadingPhase(r["phase"], r["ms_per_step"], r["step_list"] or [], cover.get(r["phase"])) for r in rows)


@measured
def loading_per_timed_step_ms(data: ProfileData) -> float:
    """Mean data-loading time per timed step, overlapping phases counted once."""
    b = basis(data)
    if not b.has_steps or not b.stat_steps:
        return 0.0
    phases = (
        f"SELECT i.* FROM ({input_phases_sql(data)}) i SEMI JOIN stat_steps s ON s.rank = i.rank AND s.step = i.step"
    )
    v = data.scalar(f"SELECT sum(end_ns - start_ns)::DOUBLE FROM ({union_sql(phases, 'rank, step')})")
    return float(v or 0) / 1e6 / b.stat_steps


@measured
def loading_per_window_ns(data: ProfileData) -> dict[tuple[int, int | None], float]:
    """(rank, step) of each GPU window -> its data-loading time (overlaps once), ns."""
    if not basis(data).windows:
        return {}
    w = gpu_windows_table(data)
    return {
        (r["rank"], r["step"]): r["ns"]
        for r in data.rows(f"""
        SELECT rank, step, sum(end_ns - start_ns)::DOUBLE AS ns FROM ({
            union_sql(
                f"SELECT i.rank, {w}.step, greatest(i.start_ns, {w}.start_ns) AS start_ns, "
                f"least(i.end_ns, {w}.end_ns) AS end_ns FROM ({input_phases_sql(data)}) i "
                f"JOIN {w} ON {w}.rank = i.rank AND i.start_ns < {w}.end_ns AND i.end_ns > {w}.start_ns",
                "rank, step",
            )
        }) GROUP BY ALL""")
    }


@measured
def copies_in_loading(data: ProfileData) -> dict[str, int]:
    """Host-to-device copies launched inside data-loading phases, by source memory kind."""
    if not (data.has("memcpy") and data.has("api")):
        return {}
    return {
        r["kind"]: int(r["n"])
        for r in data.rows(f"""
        SELECT coalesce(c.src_kind, 'unknown') AS kind, count(*) AS n
        FROM memcpy c JOIN api a ON a.rank = c.rank AND a.correlation_id = c.correlation_id
        ASOF JOIN ({input_phases_sql(data)}) i ON i.rank = a.rank AND a.start_ns >= i.start_ns
        WHERE c.copy_kind = 'HtoD' AND a.start_ns < i.end_ns GROUP BY ALL""")
    }
