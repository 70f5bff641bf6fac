"""overlap: how much of each rank's communication ran while it computed.

On the GPU this is Holistic Trace Analysis' ``get_comm_comp_overlap``: per rank, the merged time
of communication kernels that compute kernels (merged likewise) ran alongside, as a share of
the merged communication time; copies and sets count as neither. Measured against HTA on its
trace corpus in tests/test_distributed_reports.py (reference: tests/data/hta/comm_comp_overlap.json).

A CPU job (Gloo) has no kernels: communication is the time Gloo's worker threads spent in
operations, compute the time the other threads of the rank spent in framework ops.

``exposed`` communication (not overlapped) is what a step waits for: it is the part a larger
overlap could hide. Using the identity |A ∩ B| = |A| + |B| - |A ∪ B| on merged intervals, each
quantity is a union, so the whole report is three interval unions per rank.
"""

from __future__ import annotations

import pyarrow as pa

from ..core.context import ProfileData
from ..core.gpu_work import gpu_step_count, gpu_work_sql, selected_sql
from ..core.intervals import union_sql
from ..core.report import Report, ReportResult, fixed

KEYS = "rank"


def work_sql(data: ProfileData) -> tuple[str, str] | None:
    """SQL of (rank, start_ns, end_ns, category in ('comm', 'comp')) rows and the basis ('gpu' or
    'host'); None without communication."""
    gpu = gpu_work_sql(data)
    if gpu is not None and data.scalar(f"SELECT count(*) FROM ({gpu}) WHERE category = 'communication'"):
        return (
            f"""SELECT rank, start_ns, end_ns,
                CASE category WHEN 'communication' THEN 'comm' ELSE 'comp' END AS category
                    FROM ({gpu}) WHERE category IN ('communication', 'compute')""",
            "gpu",
        )
    if not data.has("comms"):
        return None
    comms = selected_sql(data, "comms", launched=True)
    if not data.scalar(f"SELECT count(*) FROM ({comms}) WHERE \"where\" = 'host'"):
        return None
    ops = selected_sql(data, "ops") if data.has("ops") else "SELECT * FROM ops WHERE FALSE"
    return (
        f"""WITH c AS (SELECT * FROM ({comms}) WHERE "where" = 'host')
                SELECT rank, start_ns, end_ns, 'comm' AS category FROM c
                UNION ALL
                SELECT o.rank, o.start_ns, o.end_ns, 'comp' FROM ({ops}) o
                WHERE o.depth = 0 AND NOT regexp_matches(o.name, '^(c10d::|record_param_comms|gloo:|nccl:)')
                  AND (o.rank, o.tid) NOT IN (SELECT DISTINCT rank, tid FROM c)""",
        "host",
    )


def overlap_sql(work: str) -> str:
    """SQL: per rank comm_ns, compute_ns, overlap_ns from ``work_sql`` rows."""

    def busy(where: str) -> str:
        return (
            f"SELECT {KEYS}, sum(end_ns - start_ns)::BIGINT AS ns "
            f"FROM ({union_sql(f'SELECT * FROM w WHERE {where}', KEYS)}) GROUP BY ALL"
        )

    return f"""
    WITH w AS MATERIALIZED ({work}),
         cm AS ({busy("category = 'comm'")}), cp AS ({busy("category = 'comp'")}), al AS ({busy("TRUE")})
    SELECT cm.rank, cm.ns AS comm_ns, coalesce(cp.ns, 0) AS compute_ns,
           cm.ns + coalesce(cp.ns, 0) - al.ns AS overlap_ns
    FROM cm JOIN al USING ({KEYS}) LEFT JOIN cp USING ({KEYS})"""


def compute(data: ProfileData) -> ReportResult:
    got = work_sql(data)
    if got is None:
        return ReportResult(
            "overlap",
            REPORT.title,
            pa.table({"rank": pa.array([], pa.int32())}),
            FORMATS,
            ["no communication in the selected steps"],
        )
    work, basis = got
    n = gpu_step_count(data) if basis == "gpu" else None
    if n is None and data.scalar("SELECT count(*) FROM steps"):
        n = int(data.scalar("SELECT count(*) FROM detail_steps") or 0)
    per_step = f"/ {n}" if n else ""
    table = data.table(f"""
        SELECT rank, '{basis}' AS basis, comm_ns / 1e6 AS comm_ms, overlap_ns / 1e6 AS overlapped_ms,
               (comm_ns - overlap_ns) / 1e6 AS exposed_ms, compute_ns / 1e6 AS compute_ms,
               100.0 * overlap_ns / nullif(comm_ns, 0) AS overlap_pct,
               {"(comm_ns - overlap_ns) / 1e6 " + per_step if n else "NULL::DOUBLE"} AS exposed_ms_per_step
        FROM ({overlap_sql(work)}) ORDER BY rank""")
    notes = [
        (
            "overlap_pct: share of the communication time during which compute also ran (HTA's comm/comp overlap)"
            if basis == "gpu"
            else (
                "host basis (no GPU kernels): communication = Gloo's worker threads, compute = framework ops "
                "on the rank's other threads"
            )
        )
    ]
    if n:
        notes.append(f"per step: over {n} step{'s' if n != 1 else ''} with detailed tracing")
    return ReportResult("overlap", REPORT.title, table, FORMATS, notes)


FORMATS = {
    **{c: fixed(3) for c in ("comm_ms", "overlapped_ms", "exposed_ms", "compute_ms", "exposed_ms_per_step")},
    "overlap_pct": fixed(2),
}

REPORT = Report(
    "overlap",
    "Compute/communication overlap per rank",
    compute,
    needs=("comms",),
    doc="per rank: communication time, the part overlapped by compute and the exposed part (HTA's comm/comp overlap)",
)
