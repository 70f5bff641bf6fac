"""GPU work attributed to application phases.

GPU work runs asynchronously, so "during the phase" is the wrong question: a kernel belongs to
the phase whose *launch* (the CUDA API call that enqueued it) happened inside it, on any thread
of the same process (backward kernels are launched by autograd's thread while the main thread
sits in ``loss.backward()``). Work with no launch record falls back to its own start time.
"""

from __future__ import annotations

from .context import ProfileData

GPU_TABLES = ("kernels", "memcpy", "memset")


def gpu_activity_sql(data: ProfileData, phase_filter: str = "TRUE") -> str | None:
    """SQL with one row per phase instance: (rank, pid, tid, start_ns, end_ns, name, step,
    gpu_ns, kernels). None when the profile has no GPU activity."""
    present = [t for t in GPU_TABLES if data.has(t)]
    if not present:
        return None
    gpu = " UNION ALL ".join(
        f"SELECT rank, correlation_id, pid, start_ns, end_ns, {1 if t == 'kernels' else 0} AS is_kernel FROM {t}"
        for t in present
    )
    return f"""
    WITH ph AS (SELECT row_number() OVER () AS pidx, * FROM phases WHERE kind = 'range' AND {phase_filter}),
         g AS ({gpu}),
         launch AS (
            SELECT g.rank, coalesce(a.pid, g.pid) AS pid, coalesce(a.start_ns, g.start_ns) AS t,
                   g.end_ns - g.start_ns AS d, g.is_kernel
            FROM g LEFT JOIN (SELECT rank, correlation_id, any_value(pid) AS pid, min(start_ns) AS start_ns
                              FROM api WHERE correlation_id IS NOT NULL GROUP BY ALL) a
              ON a.rank = g.rank AND a.correlation_id = g.correlation_id),
         {_HITS}
    SELECT ph.rank, ph.pid, ph.tid, ph.start_ns, ph.end_ns, ph.name, ph.step, ph.depth, ph.source,
           coalesce(h.gpu_ns, 0) AS gpu_ns, coalesce(h.kernels, 0) AS kernels
    FROM ph LEFT JOIN hits h USING (pidx)
    """


# Each phase's launches (``t`` in [start, end) on its rank, from its process or from none) summed
# as a difference of running sums: the running sum up to the phase's end minus the one up to its
# start, each found by an ASOF join. The same integers as joining every phase with every launch in
# it, which was a range join per rank (and the OR on the process kept it from hashing the process):
# 58 s for 8 ranks of 1M events against well under a second (bench/scale_job.py).
_HITS = """
         cum_pid AS (
            SELECT rank, pid, t, sum(d) OVER w AS d, sum(k) OVER w AS k
            FROM (SELECT rank, pid, t, sum(d) AS d, sum(is_kernel) AS k FROM launch WHERE pid IS NOT NULL GROUP BY ALL)
            WINDOW w AS (PARTITION BY rank, pid ORDER BY t ROWS UNBOUNDED PRECEDING)),
         cum_any AS (
            SELECT rank, t, sum(d) OVER w AS d, sum(k) OVER w AS k
            FROM (SELECT rank, t, sum(d) AS d, sum(is_kernel) AS k FROM launch WHERE pid IS NULL GROUP BY ALL)
            WINDOW w AS (PARTITION BY rank ORDER BY t ROWS UNBOUNDED PRECEDING)),
         hits AS (
            SELECT ph.pidx,
                   (coalesce(pe.d, 0) - coalesce(ps.d, 0) + coalesce(ae.d, 0) - coalesce(as_.d, 0))::BIGINT AS gpu_ns,
                   (coalesce(pe.k, 0) - coalesce(ps.k, 0) + coalesce(ae.k, 0) - coalesce(as_.k, 0))::BIGINT AS kernels
            FROM ph
            ASOF LEFT JOIN cum_pid pe ON pe.rank = ph.rank AND pe.pid = ph.pid AND pe.t < ph.end_ns
            ASOF LEFT JOIN cum_pid ps ON ps.rank = ph.rank AND ps.pid = ph.pid AND ps.t < ph.start_ns
            ASOF LEFT JOIN cum_any ae ON ae.rank = ph.rank AND ae.t < ph.end_ns
            ASOF LEFT JOIN cum_any as_ ON as_.rank = ph.rank AND as_.t < ph.start_ns)"""
