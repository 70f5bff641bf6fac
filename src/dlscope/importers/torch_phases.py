"""Application phases derived from a PyTorch trace, so an unmodified script gets them too.

PyTorch already annotates two things itself: every DataLoader ``__next__``
(``enumerate(DataLoader)#...``) and every optimizer call (``Optimizer.step#...``,
``Optimizer.zero_grad#...``). Those become the phases ``dataloader`` and ``optimizer``.

Forward and backward are told apart through autograd. Backward is the span of
``autograd::engine::evaluate_function: ...`` ops in an iteration. Each of them carries the
sequence number of the forward op that created its node; ops that create no node record the
*next* number. So within an iteration, the forward pass begins at the last op holding the
smallest backward sequence number (the first node creator; ops before it only peeked that
number) and ends at the end of the last op holding the largest. Where a trace lacks sequence
numbers or a backward pass (inference), forward is not derived: a guess would mislead.

Iterations are the trace's steps, else the spans between optimizer steps, else the whole trace.
The raw torch annotations are kept in ``phases`` with domain ``torch``, which the phase
breakdown leaves out so their time is not counted twice.
"""

from __future__ import annotations

import re

import duckdb

TORCH_AUTO_DOMAIN = "torch"
TORCH_AUTO_PATTERN = r"^(enumerate\(DataLoader\)#|Optimizer\.(step|zero_grad)#)"
_AUTO = re.compile(TORCH_AUTO_PATTERN)
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function:"


def is_torch_auto_annotation(name: str | None) -> bool:
    return bool(name) and _AUTO.match(name or "") is not None


def derive_torch_phases(con: duckdb.DuckDBPyConnection, ops: str, phases: str, steps: str, out: str) -> str | None:
    """Create ``out`` in ``con`` with the derived phases (dataloader, forward, backward, optimizer)
    of one rank's ``ops``, ``phases`` (annotations) and ``steps`` relations; None if there are none."""
    auto, win = f"{out}_auto", f"{out}_win"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {auto} AS
        SELECT rank, pid, tid, start_ns, end_ns, name,
               CASE WHEN name LIKE 'enumerate(DataLoader)#%' THEN 'dataloader' ELSE 'optimizer' END AS phase,
               name LIKE 'Optimizer.step#%' AS is_opt_step
        FROM {phases} WHERE regexp_matches(name, '{TORCH_AUTO_PATTERN.replace("'", "''")}')""")
    # iterations: steps, else optimizer-step ends, else everything
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {win} AS
        WITH opt AS (SELECT rank, end_ns FROM {auto} WHERE is_opt_step),
             by_opt AS (SELECT rank, coalesce(lag(end_ns) OVER (PARTITION BY rank ORDER BY end_ns), -1) AS start_ns,
                               end_ns FROM opt),
             everything AS (SELECT rank, -1 AS start_ns, 9223372036854775807 AS end_ns FROM
                            (SELECT DISTINCT rank FROM {ops} UNION SELECT DISTINCT rank FROM {phases}))
        SELECT row_number() OVER () AS wid, * FROM (
            SELECT rank, start_ns, end_ns FROM {steps}
            UNION ALL SELECT * FROM by_opt WHERE NOT EXISTS (SELECT 1 FROM {steps})
            UNION ALL SELECT * FROM everything
                      WHERE NOT EXISTS (SELECT 1 FROM {steps}) AND NOT EXISTS (SELECT 1 FROM opt))""")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE {out} AS
        WITH bw AS (
            SELECT w.wid, o.rank, any_value(o.pid) AS pid, any_value(o.tid) AS btid,
                   min(o.start_ns) AS s, max(o.end_ns) AS e,
                   min(o.sequence_nr) AS lo, max(o.sequence_nr) AS hi
            FROM {ops} o JOIN {win} w ON o.rank = w.rank AND o.start_ns >= w.start_ns AND o.start_ns < w.end_ns
            WHERE o.name LIKE '{BACKWARD_OP_PREFIX}%' GROUP BY ALL),
        fw AS (
            SELECT bw.wid,
                   arg_max(o.start_ns, o.start_ns) FILTER (WHERE o.sequence_nr = bw.lo) AS s,
                   arg_max(o.tid, o.start_ns) FILTER (WHERE o.sequence_nr = bw.lo) AS tid,
                   max(o.end_ns) FILTER (WHERE o.sequence_nr = bw.hi) AS e
            FROM bw JOIN {win} w USING (wid) JOIN {ops} o
              ON o.rank = bw.rank AND o.start_ns >= w.start_ns AND o.start_ns < bw.s
            GROUP BY bw.wid)
        SELECT *, 'range' AS kind, 'derived' AS source FROM (
            SELECT bw.rank, bw.pid, coalesce(fw.tid, bw.btid) AS tid,
                fw.s AS start_ns, fw.e AS end_ns, 'forward' AS name
            FROM bw JOIN fw USING (wid) WHERE fw.s IS NOT NULL AND fw.e IS NOT NULL AND fw.e > fw.s
            UNION ALL
            SELECT bw.rank, bw.pid, coalesce(fw.tid, bw.btid), bw.s, bw.e, 'backward' FROM bw LEFT JOIN fw USING (wid)
            UNION ALL
            SELECT rank, pid, tid, start_ns, end_ns, phase FROM {auto})""")
    con.execute(f"DROP TABLE {auto}")
    con.execute(f"DROP TABLE {win}")
    if not con.execute(f"SELECT count(*) FROM {out}").fetchall()[0][0]:
        con.execute(f"DROP TABLE {out}")
        return None
    return out
