"""The GPU work a report looks at: kernels, copies and sets of the selected steps, each with a
category (compute, communication, memory).

Selection: GPU work carries the step of the API call that launched it (see ``store.build``), so
"the selected steps' GPU work" is the work whose step is in ``sel_steps``. Work whose launch
was not recorded although it names one (a correlation id no API call has: it was launched
before tracing began) belongs to no step here, as in HTA, although the builder gives it the
step it ran in. A profile without steps has no selection: all of its GPU work counts. GPU
activity is recorded only while detailed tracing runs, so per-step figures divide by the
selected steps flagged ``traced`` (or not flagged at all, as in imported traces):
:func:`gpu_step_count`.

The categories, by kernel name, are :mod:`.kernel_category`'s.
"""

from __future__ import annotations

from .context import ProfileData
from .kernel_names import kernel_names


def has_steps(data: ProfileData) -> bool:
    return data.step_count() > 0


def selected_sql(data: ProfileData, table: str, launched: bool = False) -> str:
    """SQL: the rows of ``table`` (a view with rank and step columns) in the step selection; all
    of them in a profile without steps. ``launched``: GPU rows, which also need their launch
    recorded when they name one (see the module doc). Joins, not correlated subqueries: DuckDB
    does not always decorrelate those, and then probes a table once per row."""
    if not has_steps(data):
        return f"SELECT * FROM {table}"
    sql = f"SELECT t_.* FROM {table} t_ SEMI JOIN sel_steps s_ ON s_.rank = t_.rank AND s_.step = t_.step"
    if launched and data.has("api"):
        sql = f"""SELECT t_.* FROM ({sql}) t_
                  LEFT JOIN (SELECT DISTINCT rank, correlation_id FROM raw_api WHERE correlation_id IS NOT NULL) a_
                    ON a_.rank = t_.rank AND a_.correlation_id = t_.correlation_id
                  WHERE t_.correlation_id IS NULL OR a_.correlation_id IS NOT NULL"""
    return sql


def gpu_step_count(data: ProfileData) -> int | None:
    """How many selected steps can hold GPU work (traced or not flagged); None without steps."""
    if not has_steps(data):
        return None
    return int(data.scalar("SELECT count(*) FROM detail_steps") or 0)


def gpu_work_sql(data: ProfileData, selected: bool = True) -> str | None:
    """SQL over every kernel, copy and set (of the selected steps when ``selected``): rank,
    device (-1 when unknown), stream, start_ns, end_ns, name, kind ('kernel', 'memcpy',
    'memset'), category, correlation_id, external_id, pid, step. None when the profile has no
    GPU activity at all."""

    def src(table: str) -> str:
        return selected_sql(data, table, launched=True) if selected else f"SELECT * FROM {table}"

    parts = []
    if data.has("kernels"):
        # the category judged once per distinct name (see kernel_names)
        parts.append(f"""SELECT t.rank, coalesce(t.device, -1) AS device, t.stream, t.start_ns, t.end_ns, t.name,
                                'kernel' AS kind, n.category,
                                t.correlation_id, t.external_id, t.pid, t.step
                         FROM ({src("kernels")}) t JOIN {kernel_names(data)} n ON n.name_id = t.name_id""")
    if data.has("memcpy"):
        # named columns: a UNION takes its names from its first part, which may be this one
        parts.append(f"""SELECT rank, coalesce(device, -1) AS device, stream, start_ns, end_ns,
                               'Memcpy ' || copy_kind AS name, 'memcpy' AS kind, 'memory' AS category,
                               correlation_id, external_id, pid, step
                        FROM ({src("memcpy")}) t""")
    if data.has("memset"):
        parts.append(f"""SELECT rank, coalesce(device, -1) AS device, stream, start_ns, end_ns, 'Memset' AS name,
                               'memset' AS kind, 'memory' AS category,
                               correlation_id, external_id, pid, step FROM ({src("memset")}) t""")
    if not parts:
        return None
    return " UNION ALL ".join(parts)


def gpu_islands_sql(data: ProfileData) -> str:
    """SQL: (rank, start_ns, end_ns), the disjoint islands of time in which any kernel, copy or set
    of the rank ran (every step's, selected or not), as :func:`.intervals.union_sql` makes them.
    The headline and the idle breakdown both start from them: made once per opened profile.
    Needs GPU activity (:func:`gpu_work_sql` is not None)."""

    def source() -> str:  # the rows of gpu_work_sql(selected=False), without what it adds to them
        return " UNION ALL ".join(
            f"SELECT rank, start_ns, end_ns FROM {t}" for t in ("kernels", "memcpy", "memset") if data.has(t)
        )

    return f"SELECT rank, start_ns, end_ns FROM {data.shared_islands('gpu_islands', source)}"
