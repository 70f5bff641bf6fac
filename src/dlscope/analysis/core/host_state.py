"""What the host was doing, as unions of time intervals per rank: loading data, waiting on the
GPU, or busy with recorded work. Used to explain GPU idle time (``idle_sum``) and to split wall
time (the summary's headline).

Only the rank's main process counts (the one that launched most GPU work): a DataLoader worker
loading data in parallel does not keep the main process from launching.

* **input**: a phase whose name says data loading (:data:`DATA_LOADING_PATTERNS`): the derived
  ``dataloader`` phase (waiting in ``DataLoader.__next__``), torch's ``enumerate(DataLoader)#``
  annotation, and user phases such as ``preprocess`` or ``data_loading``.
* **sync**: a call that blocks the host until the GPU is done (:data:`SYNC_API_PATTERNS`, and
  the ``sync`` table's stream/event/context waits), extended to the host's next launch: after a
  sync the GPU's queue is empty until the host enqueues again, so that time is the sync's doing.
* **busy**: any recorded host activity: framework ops, runtime calls, application phases.
"""

from __future__ import annotations

from functools import partial

from .context import ProfileData
from .intervals import union_sql

DATA_LOADING_PATTERNS: tuple[str, ...] = (
    r"^dataloader$",  # derived from DataLoader.__next__ (importers.torch_phases)
    r"^enumerate\(dataloader\)",  # torch's own annotation of the same wait
    r"data[_ .-]?load",  # data_loading, DataLoad, data load
    r"load[_ .-]?(data|batch)",
    r"preprocess",
    r"input[_ .-]?pipeline",
    r"(get|next|fetch)[_ .-]?batch",
    r"^(data|input|batch|fetch)$",
)
SYNC_API_PATTERNS: tuple[str, ...] = (
    r"synchronize",  # cuda/cu/hip Device, Stream, Event, Ctx Synchronize
    r"^(cuda|hip)memcpy(2d|3d)?(tosymbol|fromsymbol)?$",  # blocking copies
    r"^cumemcpy(dtoh|htod|dtod)?(_v2)?$",
)
DATA_LOADING_RE = "|".join(f"({p})" for p in DATA_LOADING_PATTERNS)
SYNC_API_RE = "|".join(f"({p})" for p in SYNC_API_PATTERNS)
# Phases that cover a whole run or say when tracing ran: they tell nothing about what the host did.
NOT_ACTIVITY_DOMAINS = ("process", "trace")

HOST_CLASSES = ("input", "sync", "busy")


def main_pid_sql(data: ProfileData) -> str:
    """SQL: (rank, pid) of each rank's main process: the one that launched most GPU work, else
    the one that recorded most steps or ops (computed once per opened profile)."""
    return f"SELECT rank, pid FROM {data.shared_table('host_main_pid', lambda: _main_pid_query(data))}"


def _main_pid_query(data: ProfileData) -> str:
    parts = [
        f"SELECT rank, pid, {w} AS w FROM {t} WHERE pid IS NOT NULL"
        for t, w in (("kernels", 3), ("memcpy", 3), ("steps", 2), ("ops", 1))
        if data.has(t)
    ]
    if not parts:
        return "SELECT NULL::INTEGER AS rank, NULL::BIGINT AS pid WHERE FALSE"
    return f"""SELECT rank, arg_max(pid, n) AS pid FROM (
                   SELECT rank, pid, max(w) * 1e12 + count(*) AS n FROM ({" UNION ALL ".join(parts)}) GROUP BY ALL)
               GROUP BY rank"""


def _on_main(alias: str) -> str:
    return f"(m.pid IS NULL OR {alias}.pid IS NULL OR {alias}.pid = m.pid)"


def _input_sql(data: ProfileData) -> list[str]:
    if not data.has("phases"):
        return []
    return [
        f"""SELECT p.rank, p.start_ns, p.end_ns FROM phases p LEFT JOIN mp m USING (rank)
                WHERE p.kind = 'range' AND {_on_main("p")}
                  AND regexp_matches(lower(p.name), '{DATA_LOADING_RE}')"""
    ]


def _sync_sql(data: ProfileData) -> list[str]:
    waits = []
    if data.has("api"):
        waits.append(f"""SELECT a.rank, a.pid, a.start_ns, a.end_ns FROM api a LEFT JOIN mp m USING (rank)
                         WHERE {_on_main("a")} AND regexp_matches(lower(a.name), '{SYNC_API_RE}')""")
    if data.has("sync"):
        waits.append(f"""SELECT s.rank, s.pid, s.start_ns, s.end_ns FROM sync s LEFT JOIN mp m USING (rank)
                         WHERE {_on_main("s")} AND s.kind <> 'stream_wait_event'""")
    if not waits:
        return []
    launches = _launches_sql(data)
    if launches is None:
        return [f"SELECT rank, start_ns, end_ns FROM ({' UNION ALL '.join(waits)})"]
    # until the next launch of the same process (ASOF: the first launch starting at or after the wait's end)
    return [
        f"""SELECT w.rank, w.start_ns, greatest(w.end_ns, coalesce(l.start_ns, w.end_ns)) AS end_ns
                FROM (SELECT rank, coalesce(pid, -1) AS pid, start_ns, end_ns FROM ({" UNION ALL ".join(waits)})) w
                ASOF LEFT JOIN ({launches}) l ON w.rank = l.rank AND w.pid = l.pid AND w.end_ns <= l.start_ns"""
    ]


def _launches_sql(data: ProfileData) -> str | None:
    """API calls that enqueued GPU work: (rank, pid, start_ns)."""
    gpu = [t for t in ("kernels", "memcpy", "memset") if data.has(t)]
    if not gpu or not data.has("api"):
        return None
    corr = " UNION ALL ".join(f"SELECT rank, correlation_id FROM {t} WHERE correlation_id IS NOT NULL" for t in gpu)
    return f"""SELECT a.rank, coalesce(a.pid, -1) AS pid, a.start_ns FROM api a
               SEMI JOIN ({corr}) g ON g.rank = a.rank AND g.correlation_id = a.correlation_id"""


def _busy_sql(data: ProfileData) -> list[str]:
    out = []
    if data.has("ops"):  # nested ops lie inside their parents: the outermost ones make the same union
        out.append(f"""SELECT x.rank, x.start_ns, x.end_ns FROM raw_ops x LEFT JOIN mp m USING (rank)
                       WHERE coalesce(x.depth, 0) = 0 AND {_on_main("x")}""")
    if data.has("api"):
        out.append(
            f"SELECT x.rank, x.start_ns, x.end_ns FROM raw_api x LEFT JOIN mp m USING (rank) WHERE {_on_main('x')}"
        )
    if data.has("phases"):
        domains = ", ".join(f"'{d}'" for d in NOT_ACTIVITY_DOMAINS)
        out.append(f"""SELECT x.rank, x.start_ns, x.end_ns FROM phases x LEFT JOIN mp m USING (rank)
                       WHERE x.kind = 'range' AND coalesce(x.domain, '') NOT IN ({domains}) AND {_on_main("x")}""")
    return out


EMPTY_INTERVALS = "SELECT NULL::INTEGER AS rank, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns WHERE FALSE"


def host_ctes(data: ProfileData) -> str:
    """Common table expressions (to follow WITH), over temp tables made once per opened profile: ``mp`` (each rank's
    main process) and ``h_input``, ``h_sync``, ``h_busy``: each class's disjoint islands
    (rank, start_ns, end_ns), empty when nothing of the class was recorded."""
    ctes = [f"mp AS ({main_pid_sql(data)})"]
    for c in HOST_CLASSES:
        ctes.append(f"h_{c} AS (SELECT * FROM {data.shared_islands(f'host_{c}', partial(_intervals_query, data, c))})")
    return ",\n".join(ctes)


def _intervals_query(data: ProfileData, host_class: str) -> str:
    """The intervals of one host class (their islands are made once per opened profile:
    every caller of :func:`host_ctes` reads the same ones)."""
    parts = {"input": _input_sql, "sync": _sync_sql, "busy": _busy_sql}[host_class](data)
    src = " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts) if parts else EMPTY_INTERVALS
    return f"WITH mp AS ({main_pid_sql(data)}) {src}"


def classes_union_sql(classes: tuple[str, ...], extra: str | None = None) -> str:
    """SQL over :func:`host_ctes`: disjoint islands where the host was in any of ``classes``
    (or ``extra``, more (rank, start_ns, end_ns) rows, covers the instant)."""
    parts = [f"SELECT rank, start_ns, end_ns FROM h_{c}" for c in classes] + ([extra] if extra else [])
    return union_sql(" UNION ALL ".join(parts), "rank")
