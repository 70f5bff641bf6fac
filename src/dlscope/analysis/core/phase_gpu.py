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
         hits AS (
            SELECT ph.pidx, sum(l.d)::BIGINT AS gpu_ns, sum(l.is_kernel)::BIGINT AS kernels
            FROM ph JOIN launch l ON l.rank = ph.rank AND (l.pid = ph.pid OR l.pid IS NULL)
             AND l.t >= ph.start_ns AND l.t < ph.end_ns
            GROUP BY ph.pidx)
    SELECT ph.rank, ph.pid, ph.tid, ph.start_ns, ph.end_ns, ph.name, ph.step, ph.depth, ph.source,
           coalesce(h.gpu_ns, 0) AS gpu_ns, coalesce(h.kernels, 0) AS kernels
    FROM ph LEFT JOIN hits h USING (pidx)
    """
