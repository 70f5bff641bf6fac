"""Per step: how long the GPU sat idle, and why; and how long the host sat waiting on the GPU.

The windows are the selected steps that hold GPU data (traced, or not flagged as in imported
traces); a profile without steps has one window per rank: the span of its recorded activity (as
the summary's headline). Within each window every instant counts once, by precedence:

* **busy**: a kernel, copy or set ran (any stream of the rank's GPUs, whichever step launched it);
* **queued**: idle, but the work that ended the gap had already been launched when it began
  (the GPU waited on itself: dependent-kernel latency, a wait on another stream). Not the host's
  doing, as in :mod:`.idle_sum`;
* **input**, **sync**, **launch**: the host's state (see :mod:`.host_state`): in a data-loading
  phase; blocked in (or just back from) a synchronizing call; busy with other recorded work;
* **other**: no recorded host activity.

They are computed as cumulative unions by precedence (busy, + queued, + input, + sync, + host
busy), each one's coverage of the window minus the previous one's: the same method as the
headline, per window instead of in total, so the gaps at a window's edges (the GPU waiting for a
step's first launch) count too, which a span-based breakdown leaves out.

**Host waits** (``wait_ns``): the time the rank's main process spent blocked on the GPU inside
the window: synchronizing calls (:data:`.host_state.SYNC_API_PATTERNS`, the ``sync`` table's
waits) and copy calls that block because host memory is pageable (``pageable_wait_ns``: copies
whose source or destination is pageable). A step cannot get shorter by more than the host
waited on the GPU when only the GPU work gets faster: the host's own work remains.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..reports.idle_sum import gaps_sql
from . import interval_arrays as ia
from .context import ProfileData
from .gpu_work import gpu_islands_sql, gpu_work_sql, has_steps
from .host_state import EMPTY_INTERVALS, HOST_CLASSES, SYNC_API_RE, host_ctes
from .intervals import union_sql

HOST_ACTIVITY_TABLES = ("ops", "api", "kernels", "memcpy", "memset")
GPU_TABLES = ("kernels", "memcpy", "memset")
COLUMNS = (
    "rank",
    "step",
    "start_ns",
    "end_ns",
    "window_ns",
    "busy_ns",
    "queued_ns",
    "input_ns",
    "sync_ns",
    "launch_ns",
    "other_ns",
    "wait_ns",
    "sync_wait_ns",
    "pageable_wait_ns",
)


def windows_sql(data: ProfileData) -> str:
    """SQL: (rank, step, start_ns, end_ns) of the windows (see the module doc): the detail steps
    that launched GPU work (idle time means nothing in a step that used no GPU)."""
    if has_steps(data):
        launched = " UNION ".join(
            f"SELECT DISTINCT rank, step FROM {t} WHERE step IS NOT NULL" for t in GPU_TABLES if data.has(t)
        )
        return f"""SELECT s.rank, s.step, s.start_ns, s.end_ns FROM detail_steps s
                   SEMI JOIN ({launched or "SELECT NULL::INTEGER AS rank, NULL::INTEGER AS step"}) g
                     ON g.rank = s.rank AND g.step = s.step"""
    spans = " UNION ALL ".join(f"SELECT rank, start_ns, end_ns FROM {t}" for t in HOST_ACTIVITY_TABLES if data.has(t))
    if not spans:
        return (
            "SELECT NULL::INTEGER AS rank, NULL::INTEGER AS step, NULL::BIGINT AS start_ns, NULL::BIGINT AS end_ns"
            " WHERE FALSE"
        )
    return f"""SELECT rank, NULL::INTEGER AS step, min(start_ns) AS start_ns, max(end_ns) AS end_ns
               FROM ({spans}) GROUP BY rank"""


def _waits_sql(data: ProfileData) -> tuple[str, str]:
    """SQL of the main process's blocking waits: (sync waits, pageable-copy waits), each
    (rank, start_ns, end_ns); :data:`EMPTY_INTERVALS` when none can be recorded."""
    sync, pageable = [], []
    if data.has("api"):
        sync.append(f"""SELECT a.rank, a.start_ns, a.end_ns FROM api a LEFT JOIN mp m USING (rank)
                        WHERE (m.pid IS NULL OR a.pid IS NULL OR a.pid = m.pid)
                          AND regexp_matches(lower(a.name), '{SYNC_API_RE}')""")
        if data.has("memcpy"):
            pageable.append("""SELECT a.rank, a.start_ns, a.end_ns FROM api a LEFT JOIN mp m USING (rank)
                               SEMI JOIN memcpy c ON c.rank = a.rank AND c.correlation_id = a.correlation_id
                                    AND 'pageable' IN (coalesce(c.src_kind, ''), coalesce(c.dst_kind, ''))
                               WHERE (m.pid IS NULL OR a.pid IS NULL OR a.pid = m.pid)""")
    if data.has("sync"):
        sync.append("""SELECT s.rank, s.start_ns, s.end_ns FROM sync s LEFT JOIN mp m USING (rank)
                       WHERE (m.pid IS NULL OR s.pid IS NULL OR s.pid = m.pid) AND s.kind <> 'stream_wait_event'""")

    def union(parts: list[str]) -> str:
        return union_sql(" UNION ALL ".join(parts), "rank") if parts else EMPTY_INTERVALS

    return union(sync), union(pageable)


def step_idle(data: ProfileData) -> pa.Table:
    """One row per window (columns :data:`COLUMNS`, durations in ns). Empty when the profile
    has no GPU activity or no window.

    The interval sets come from SQL (the shared GPU and host islands, the queued gaps, the
    waits); their cumulative unions and the windows' coverage are computed in numpy
    (:mod:`.interval_arrays`: the same integers as :mod:`.intervals`, a tenth of the time)."""
    work = gpu_work_sql(data, selected=False)
    if work is None:
        return pa.table({c: pa.array([], pa.int64()) for c in COLUMNS})
    con = data.con
    win = con.execute(f"""SELECT rank, step, start_ns, end_ns FROM ({windows_sql(data)}) WHERE end_ns > start_ns
                          ORDER BY rank, step""").fetchnumpy()
    ctes = host_ctes(data)

    def fetch(sql: str) -> ia.Intervals:
        return con.execute(f"WITH {ctes} SELECT rank, start_ns, end_ns FROM ({sql})").fetchnumpy()

    gpu = fetch(gpu_islands_sql(data))
    queued = fetch(f"""WITH work AS MATERIALIZED ({work})
                       SELECT rank, start_ns, end_ns FROM ({gaps_sql(data, "SELECT * FROM work")}) WHERE queued""")
    hosts = {c: fetch(f"SELECT * FROM h_{c}") for c in HOST_CLASSES}
    sync_waits, pageable_waits = (fetch(w) for w in _waits_sql(data))
    # each layer: the previous layer's islands and one more class, by precedence
    layers = {"c0": gpu}
    layers["c1"] = ia.union(ia.concat(gpu, queued))
    layers["c2"] = ia.union(ia.concat(layers["c1"], hosts["input"]))
    layers["c3"] = ia.union(ia.concat(layers["c2"], hosts["sync"]))
    layers["c4"] = ia.union(ia.concat(layers["c3"], hosts["busy"]))
    layers["w_all"] = ia.union(ia.concat(sync_waits, pageable_waits))
    layers["w_sync"], layers["w_page"] = sync_waits, pageable_waits
    cov = {k: ia.covered(win["rank"], win["start_ns"], win["end_ns"], v) for k, v in layers.items()}
    start, end = (np.asarray(win[c], dtype=np.int64) for c in ("start_ns", "end_ns"))
    cols = {
        "rank": pa.array(win["rank"]),
        "step": pa.array(win["step"]),
        "start_ns": pa.array(start),
        "end_ns": pa.array(end),
        "window_ns": end - start,
        "busy_ns": cov["c0"],
        "queued_ns": cov["c1"] - cov["c0"],
        "input_ns": cov["c2"] - cov["c1"],
        "sync_ns": cov["c3"] - cov["c2"],
        "launch_ns": cov["c4"] - cov["c3"],
        "other_ns": end - start - cov["c4"],
        "wait_ns": cov["w_all"],
        "sync_wait_ns": cov["w_sync"],
        "pageable_wait_ns": cov["w_page"],
    }
    return pa.table({k: v if isinstance(v, pa.Array) else pa.array(v, pa.int64()) for k, v in cols.items()})
