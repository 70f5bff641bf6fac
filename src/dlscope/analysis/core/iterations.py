"""Iterations: which markers define steps, and re-deriving steps from a key node.

A stored profile carries the steps its source defined (dlscope's step(), ``ProfilerStep#N``, an
optimizer step). ``--key-node NAME`` replaces them with iterations marked by a named phase (NVTX
range, annotation) or op, as DLProf did: iteration *i* ends where the *i*-th instance of the key
node ends and begins where the previous one ended (the first begins at its own start), so
iterations tile the run and whatever happens between key nodes (data loading, logging) counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import NoStepsError
from ...store.build import key_node_steps_sql, step_of_sql
from ...store.reader import decoded_sql

if TYPE_CHECKING:
    import duckdb

STEP_MARKERS = (
    "dlscope steps (prof.step())",
    "ProfilerStep#N ranges (torch.profiler)",
    "optimizer steps (dlscope profile on an unmodified script)",
)

# event views whose step column follows the steps (time column, or launch correlation)
_TIMED = {"phases": "start_ns", "ops": "start_ns", "api": "start_ns", "sync": "start_ns", "counters": "ts_ns"}
_LAUNCHED = ("kernels", "memcpy", "memset")


def no_steps_message(key_node: str | None = None) -> str:
    if key_node:
        return (
            f"no phase, range or op named {key_node!r} was found to mark iterations "
            "(names are matched exactly; 'dlscope sql PROFILE \"select distinct name from phases\"' lists them)"
        )
    return (
        "no iterations found: looked for "
        + ", ".join(STEP_MARKERS)
        + "; name a range or op that marks one iteration with --key-node NAME"
    )


def apply_key_node(con: duckdb.DuckDBPyConnection, key_node: str, names_listed: bool = False) -> int:
    """Replace the ``steps`` view and every event view's ``step`` with key-node iterations.
    Returns the number of iterations; raises NoStepsError when the key node does not occur.
    ``names_listed``: how the profile's views decode names (StoredProfile.names_listed)."""

    def stored(table: str) -> str:  # the rows as stored, names decoded (the views are replaced below)
        return decoded_sql(table, listed=names_listed)

    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE kn_inst AS
        SELECT rank, start_ns, end_ns, pid, tid FROM raw_phases p JOIN strings s ON s.id = p.name_id
        WHERE s.value = $1 AND p.kind = 'range'
        UNION ALL
        SELECT rank, start_ns, end_ns, pid, tid FROM raw_ops o JOIN strings s ON s.id = o.name_id WHERE s.value = $1
    """,
        [key_node],
    )
    n = con.execute("SELECT count(*) FROM kn_inst").fetchall()[0][0]
    if not n:
        raise NoStepsError(no_steps_message(key_node))
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE kn_steps AS """
        + key_node_steps_sql(
            "kn_inst",
            traced="""
        EXISTS (SELECT 1 FROM raw_steps r WHERE r.rank = kn_inst.rank AND r.traced
                AND r.start_ns < kn_inst.end_ns AND r.end_ns > kn_inst.start_ns)""",
        )
    )
    con.execute("CREATE OR REPLACE VIEW steps AS SELECT * FROM kn_steps")
    for name, col in _TIMED.items():
        numbered = f"SELECT row_number() OVER () AS rid, * FROM ({stored(name)})"
        con.execute(f"CREATE OR REPLACE TEMP TABLE kn_{name} AS {numbered}")
        con.execute(f"""CREATE OR REPLACE VIEW {name} AS
            SELECT t.* EXCLUDE (rid, step), s.step FROM kn_{name} t
            LEFT JOIN ({step_of_sql(f"kn_{name}", col, "kn_steps")}) s USING (rid)""")
    for name in _LAUNCHED:
        numbered = f"SELECT row_number() OVER () AS rid, * FROM ({stored(name)})"
        con.execute(f"CREATE OR REPLACE TEMP TABLE kn_{name} AS {numbered}")
        con.execute(f"""CREATE OR REPLACE VIEW {name} AS
            SELECT t.* EXCLUDE (rid, step), coalesce(a.step, o.step) AS step FROM kn_{name} t
            LEFT JOIN (SELECT rank, correlation_id, any_value(step) AS step FROM api
                       WHERE correlation_id IS NOT NULL GROUP BY ALL) a
              ON a.rank = t.rank AND a.correlation_id = t.correlation_id
            LEFT JOIN ({step_of_sql(f"kn_{name}", "start_ns", "kn_steps")}) o USING (rid)""")
    return int(n)
