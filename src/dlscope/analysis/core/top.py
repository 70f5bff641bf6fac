"""The kernels and the framework ops that take the most time, over the selected steps."""

from __future__ import annotations

import pyarrow as pa

from .context import ProfileData
from .window import step_filter


def top_kernels(data: ProfileData, limit: int = 15) -> pa.Table:
    """One row per kernel name: ``count``, ``total_ns``, ``mean_ns``, ``max_ns`` and ``pct`` (of
    all kernel time in the selection), the longest first."""
    return data.table(f"""
        WITH k AS (SELECT name, end_ns - start_ns AS d FROM kernels WHERE {step_filter(data)})
        SELECT name, count(*) AS count, sum(d)::BIGINT AS total_ns, avg(d) AS mean_ns, max(d) AS max_ns,
               100.0 * sum(d) / (SELECT sum(d) FROM k) AS pct
        FROM k GROUP BY name ORDER BY total_ns DESC, name LIMIT {int(limit)}""")


def top_ops(data: ProfileData, limit: int = 15) -> pa.Table:
    """One row per op name: ``count``, ``self_ns`` (time in the op itself, children excluded: sums
    without double counting), ``total_ns`` (including children) and ``pct`` (of all ops' self
    time in the selection), by self time."""
    return data.table(f"""
        WITH o AS (SELECT name, end_ns - start_ns AS d, coalesce(self_ns, end_ns - start_ns) AS s
                   FROM ops WHERE {step_filter(data)})
        SELECT name, count(*) AS count, sum(s)::BIGINT AS self_ns, sum(d)::BIGINT AS total_ns,
               100.0 * sum(s) / (SELECT sum(s) FROM o) AS pct
        FROM o GROUP BY name ORDER BY self_ns DESC, name LIMIT {int(limit)}""")
