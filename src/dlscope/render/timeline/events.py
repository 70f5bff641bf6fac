"""Every event of a profile as one row of a DuckDB table, with its JSON text made by SQL.

Rows of ``tl_ev`` carry what the timeline needs to place an event (rank, device, layer, OS
pid/tid or stream: the track it goes on) and its Chrome-trace JSON without pid/tid (those are
numbered once tracks are known). Categories and argument names follow Kineto's dialect
(``cpu_op``, ``cuda_runtime``, ``kernel`` with ``device``/``stream``/``correlation`` ...) so that
``dlscope import`` reads an exported timeline back.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ...store.schema import METRICS

# Layers, in the order their tracks appear inside a process (application -> hardware).
LAYER_STEPS, LAYER_PHASES, LAYER_DERIVED, LAYER_OPS, LAYER_API, LAYER_SYNC = 0, 1, 2, 3, 4, 5
LAYER_STREAM, LAYER_COUNTER = 10, 20
LAYER_NAMES = {LAYER_STEPS: "steps", LAYER_PHASES: "phases", LAYER_DERIVED: "derived phases",
               LAYER_OPS: "ops", LAYER_API: "CUDA API", LAYER_SYNC: "CUDA sync", LAYER_STREAM: "stream"}
GPU_KINDS = ("kernel", "memcpy", "memset")

_SYNC_NAMES = {"stream": "Stream Sync", "event": "Event Sync", "context": "Context Sync",
               "stream_wait_event": "Stream Wait Event"}


@dataclass(frozen=True)
class StepWindow:
    """Inclusive step numbers; None leaves that end open."""

    start: int | None = None
    stop: int | None = None

    def sql(self, col: str = "step") -> str:
        cond = [f"{col} IS NOT NULL"]
        if self.start is not None:
            cond.append(f"{col} >= {int(self.start)}")
        if self.stop is not None:
            cond.append(f"{col} <= {int(self.stop)}")
        return " AND ".join(cond)


def _define_macros(con: duckdb.DuckDBPyConnection, base_ns: int) -> None:
    # microseconds with exactly three decimals, from integer ns (no float rounding)
    con.execute(f"""CREATE OR REPLACE TEMP MACRO tl_us(ns) AS
        ((ns - {int(base_ns)}) // 1000)::VARCHAR || '.' || lpad(((ns - {int(base_ns)}) % 1000)::VARCHAR, 3, '0')""")
    con.execute("""CREATE OR REPLACE TEMP MACRO tl_dur(ns) AS
        (greatest(ns, 0) // 1000)::VARCHAR || '.' || lpad((greatest(ns, 0) % 1000)::VARCHAR, 3, '0')""")
    # one "key":value pair, or NULL (concat_ws skips NULLs) so absent values leave no key
    con.execute("CREATE OR REPLACE TEMP MACRO tl_kv(k, v) AS CASE WHEN v IS NOT NULL THEN k || v::VARCHAR END")
    con.execute("""CREATE OR REPLACE TEMP MACRO tl_js(s) AS CASE WHEN s IS NOT NULL THEN to_json(s)::VARCHAR END""")
    # shapes/dtypes are stored as JSON text by the importers; anything else is quoted as a string
    con.execute("""CREATE OR REPLACE TEMP MACRO tl_raw(s) AS
        CASE WHEN s IS NULL THEN NULL WHEN json_valid(s) THEN json(s)::VARCHAR ELSE to_json(s)::VARCHAR END""")


def _args(*pairs: str) -> str:
    """SQL for a JSON object from ``tl_kv(...)`` pairs (each already 'key':value text or NULL)."""
    return "'{' || concat_ws(',', " + ", ".join(pairs) + ") || '}'"


def _host(kind: str, cat: str, layer: str, name: str, args: str, table: str, where: str,
          ph: str = "X", per_thread: bool = True, corr: str = "NULL::BIGINT") -> str:
    thread = "coalesce(pid, -1) AS opid, coalesce(tid, -1) AS otid" if per_thread else "-1 AS opid, -1 AS otid"
    return f"""SELECT '{kind}' AS kind, '{ph}' AS ph, {cat} AS cat, {name} AS name_json, rank,
               -1 AS dev, {layer} AS layer, {thread}, -1 AS stream,
               start_ns, end_ns, {corr} AS corr, {args} AS args
        FROM {table} WHERE {where}"""


def _gpu(kind: str, cat: str, name: str, extra_args: tuple[str, ...], table: str, where: str) -> str:
    args = _args("tl_kv('\"device\":', device)", "tl_kv('\"stream\":', stream)",
                 "tl_kv('\"correlation\":', correlation_id)", "tl_kv('\"External id\":', external_id)",
                 *extra_args, "tl_kv('\"step\":', step)")
    return f"""SELECT '{kind}' AS kind, 'X' AS ph, '{cat}' AS cat, {name} AS name_json, rank,
               coalesce(device, -2) AS dev, {LAYER_STREAM} AS layer, -1 AS opid, -1 AS otid,
               coalesce(stream, -1) AS stream, start_ns, end_ns, correlation_id AS corr, {args} AS args
        FROM {table} WHERE {where}"""


def build_events(con: duckdb.DuckDBPyConnection, base_ns: int, window: StepWindow | None) -> None:
    """Create the temp table ``tl_ev`` (one row per slice, instant and counter sample) in ``con``,
    a connection with the profile's views."""
    _define_macros(con, base_ns)
    w = window.sql() if window else "TRUE"
    sync_name = "CASE kind " + " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in _SYNC_NAMES.items()) + " ELSE 'Sync' END"
    units = " ".join(f"WHEN {_lit(m)} THEN {_lit(u)}" for m, (u, _) in METRICS.items())
    parts = [
        _host("step", "'user_annotation'", str(LAYER_STEPS), "to_json('ProfilerStep#' || step)::VARCHAR",
              _args("tl_kv('\"step\":', step)", "tl_kv('\"warmup\":', warmup)",
                    "tl_kv('\"source\":', tl_js(source))"), "steps", w, per_thread=False),
        _host("phase", "CASE WHEN source = 'derived' THEN 'dlscope_derived' ELSE 'user_annotation' END",
              f"CASE WHEN source = 'derived' THEN {LAYER_DERIVED} ELSE {LAYER_PHASES} END", "tl_js(name)",
              _args("tl_kv('\"source\":', tl_js(source))", "tl_kv('\"domain\":', tl_js(domain))",
                    "tl_kv('\"step\":', step)"), "phases", f"kind = 'range' AND {w}"),
        _host("mark", "'user_annotation'",
              f"CASE WHEN source = 'derived' THEN {LAYER_DERIVED} ELSE {LAYER_PHASES} END", "tl_js(name)",
              _args("tl_kv('\"source\":', tl_js(source))", "tl_kv('\"domain\":', tl_js(domain))",
                    "tl_kv('\"step\":', step)"), "phases", f"kind = 'mark' AND {w}", ph="i"),
        _host("op", "coalesce(category, 'cpu_op')", str(LAYER_OPS), "tl_js(name)",
              _args("tl_kv('\"External id\":', external_id)", "tl_kv('\"Sequence number\":', sequence_nr)",
                    "tl_kv('\"Fwd thread id\":', fwd_tid)", "tl_kv('\"Input Dims\":', tl_raw(input_shapes))",
                    "tl_kv('\"Input type\":', tl_raw(input_types))", "tl_kv('\"step\":', step)"), "ops", w),
        _host("api", "CASE WHEN kind = 'driver' THEN 'cuda_driver' ELSE 'cuda_runtime' END", str(LAYER_API),
              "tl_js(name)",
              _args("tl_kv('\"cbid\":', cbid)", "tl_kv('\"correlation\":', correlation_id)",
                    "tl_kv('\"External id\":', external_id)", "tl_kv('\"step\":', step)"), "api", w,
              corr="correlation_id"),
        _host("sync", "'cuda_sync'", str(LAYER_SYNC), f"to_json({sync_name})::VARCHAR",
              _args("tl_kv('\"device\":', device)", "tl_kv('\"stream\":', stream)",
                    "tl_kv('\"correlation\":', correlation_id)", f"tl_kv('\"cuda_sync_kind\":', tl_js({sync_name}))",
                    "tl_kv('\"step\":', step)"), "sync", w),
        _gpu("kernel", "kernel", "tl_js(name)",
             ("CASE WHEN grid_x IS NOT NULL THEN '\"grid\":[' || grid_x || ',' || coalesce(grid_y, 1) || ',' "
              "|| coalesce(grid_z, 1) || ']' END",
              "CASE WHEN block_x IS NOT NULL THEN '\"block\":[' || block_x || ',' || coalesce(block_y, 1) || ',' "
              "|| coalesce(block_z, 1) || ']' END",
              "tl_kv('\"registers per thread\":', registers)", "tl_kv('\"shared memory\":', shared_bytes)"),
             "kernels", w),
        # names as Kineto writes them, so that the importer recovers copy and memory kinds
        _gpu("memcpy", "gpu_memcpy",
             "to_json('Memcpy ' || copy_kind || ' (' || _tl_cap(src_kind) || ' -> ' || _tl_cap(dst_kind) || ')')::VARCHAR",
             ("tl_kv('\"bytes\":', bytes)",), "memcpy", w),
        _gpu("memset", "gpu_memset", "to_json('Memset (' || _tl_cap(mem_kind) || ')')::VARCHAR",
             ("tl_kv('\"bytes\":', bytes)",), "memset", w),
        f"""SELECT 'counter' AS kind, 'C' AS ph, NULL AS cat, tl_js(metric) AS name_json, rank,
               CASE WHEN device IS NULL OR device < 0 THEN -1 ELSE device END AS dev, {LAYER_COUNTER} AS layer,
               -1 AS opid, -1 AS otid, -1 AS stream, ts_ns AS start_ns, ts_ns AS end_ns, NULL::BIGINT AS corr,
               '{{' || to_json(CASE metric {units} ELSE 'value' END)::VARCHAR || ':' || value::VARCHAR || '}}' AS args
        FROM counters WHERE isfinite(value) AND {w}""",
    ]
    con.execute("""CREATE OR REPLACE TEMP MACRO _tl_cap(s) AS
        CASE WHEN s IS NULL OR s = '' THEN 'Unknown' ELSE upper(left(s, 1)) || substr(s, 2) END""")
    con.execute(f"""CREATE OR REPLACE TEMP TABLE tl_ev AS
        SELECT row_number() OVER (ORDER BY start_ns, layer) AS rid, 0 AS lane, *
        FROM ({" UNION ALL ".join(parts)})""")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
