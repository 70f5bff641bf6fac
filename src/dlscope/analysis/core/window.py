"""The part of a profile that statistics cover: the selected steps, or the whole run when the
profile has no steps. Shared by the reports that are not per-step tables.

Timings use ``stat_steps`` (the selection less the steps slowed by detailed tracing); framework
ops, runtime calls and GPU work exist only in traced steps, so their per-step figures divide by
the selected steps that were traced (:data:`DETAIL_STEPS`)."""

from __future__ import annotations

from .context import ProfileData

DETAIL_STEPS = "detail_steps"  # see ProfileData._select_detail_steps


def detail_step_count(data: ProfileData) -> int:
    """Selected steps during which ops, runtime calls and GPU work were recorded."""
    return int(data.scalar(f"SELECT count(*) FROM {DETAIL_STEPS}") or 0)


def has_selected_steps(data: ProfileData) -> bool:
    return bool(data.scalar("SELECT count(*) FROM sel_steps"))


def step_filter(data: ProfileData, alias: str = "") -> str:
    """SQL condition keeping rows (of a table with rank and step) in the selected steps; TRUE when
    the profile has no steps."""
    if not has_selected_steps(data):
        return "TRUE"
    p = f"{alias}." if alias else ""
    return f"({p}rank, {p}step) IN (SELECT rank, step FROM sel_steps)"


def selected_span(data: ProfileData) -> tuple[int, int] | None:
    """(start_ns, end_ns) of the selected steps (first start to last end), else of every event."""
    if has_selected_steps(data):
        row = data.con.execute("SELECT min(start_ns), max(end_ns) FROM sel_steps").fetchall()[0]
    else:
        row = data.con.execute("""SELECT min(s), max(e) FROM (
            SELECT min(start_ns) s, max(end_ns) e FROM phases UNION ALL
            SELECT min(start_ns), max(end_ns) FROM ops UNION ALL
            SELECT min(start_ns), max(end_ns) FROM api UNION ALL
            SELECT min(start_ns), max(end_ns) FROM kernels UNION ALL
            SELECT min(start_ns), max(end_ns) FROM memcpy UNION ALL
            SELECT min(start_ns), max(end_ns) FROM memset UNION ALL
            SELECT min(ts_ns), max(ts_ns) FROM counters)""").fetchall()[0]
    if row[0] is None or row[1] is None or row[1] <= row[0]:
        return None
    return int(row[0]), int(row[1])
