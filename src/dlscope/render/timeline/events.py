"""What each table of a profile becomes on the timeline: SQL for its events' tracks and JSON text.

Each :class:`Source` says, for one kind of event (steps, phases, marks, module calls, ops, API calls, syncs,
kernels, copies, sets, counter samples), which track a row goes on (rank, device, layer, OS
pid/tid or stream) and how its Chrome-trace JSON reads, without pid/tid (those are numbered once
tracks are known, see tracks.py; lines.py puts the pieces together). Categories and argument
names follow Kineto's dialect (``cpu_op``, ``cuda_runtime``, ``kernel`` with
``device``/``stream``/``correlation`` ...) so that ``dlscope import`` reads an exported timeline
back.

Names are interned in ``strings``: their JSON text is made once per string (``tl_str``), not once
per event, and the rows refer to it by id.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from ...store.schema import METRICS

# Layers, in the order their tracks appear inside a process (application -> hardware); only their
# order counts (tracks are numbered by it).
LAYER_STEPS, LAYER_PHASES, LAYER_DERIVED, LAYER_MODULES, LAYER_OPS, LAYER_API, LAYER_SYNC = 0, 1, 2, 3, 4, 5, 6
LAYER_STREAM, LAYER_COUNTER = 10, 20
LAYER_NAMES = {
    LAYER_STEPS: "steps",
    LAYER_PHASES: "phases",
    LAYER_DERIVED: "derived phases",
    LAYER_MODULES: "modules",
    LAYER_OPS: "ops",
    LAYER_API: "CUDA API",
    LAYER_SYNC: "CUDA sync",
    LAYER_STREAM: "stream",
}
# the columns naming a track, before overlap lanes (see tracks.py)
TRACK_KEYS = ("rank", "dev", "layer", "opid", "otid", "stream")

_SYNC_NAMES = {
    "stream": "Stream Sync",
    "event": "Event Sync",
    "context": "Context Sync",
    "stream_wait_event": "Stream Wait Event",
}
# below this many ns from the base, a double holds ns / 1000 closely enough that its DECIMAL(18,3)
# text is exact (checked up to 2**50 against integer arithmetic); 2**50 ns is 13 days
_EXACT_DOUBLE_NS = 2**50


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


@dataclass(frozen=True)
class Source:
    """One kind of event: rows of ``table`` (aliased ``t``) that ``where`` keeps.

    ``ph`` is the Chrome-trace phase (X slice, i instant, C counter); ``keys`` the SQL of the
    TRACK_KEYS columns; ``cat``, ``name`` and ``args`` SQL giving JSON text (``args`` the
    members of the args object, without braces); ``joins`` the ``tl_str`` joins they use;
    ``corr`` the correlation id (API calls and GPU work: what flows connect)."""

    kind: str
    table: str
    where: str
    ph: str
    keys: tuple[str, str, str, str, str, str]
    cat: str
    name: str
    args: str
    joins: str = ""
    corr: str = "NULL::BIGINT"
    end: str = "t.end_ns"
    start: str = "t.start_ns"

    @property
    def gpu(self) -> bool:
        return self.keys[2] == str(LAYER_STREAM)

    def from_sql(self, names: bool = True) -> str:
        """FROM and WHERE; without the joins of the names unless ``names``. The rows are read
        as stored (``raw_<table>``: interned names as ids, decoded here once per string)."""
        return f"FROM raw_{self.table} t {self.joins if names else ''} WHERE {self.where}"

    def keys_sql(self) -> str:
        return ", ".join(f"{k} AS {name}" for k, name in zip(self.keys, TRACK_KEYS))


def define_macros(con: duckdb.DuckDBPyConnection, base_ns: int) -> None:
    """Number formats (microseconds with three decimals, since ``base_ns``) and ``tl_str``, the
    JSON text of every interned string: as a JSON string (``js``) and, for shapes and dtypes
    (stored as JSON text by the importers), as the JSON value itself (``raw``, quoted when it is
    not valid JSON), and ``given``: ``raw`` but NULL for a list of empty strings (PyTorch's Concrete
    Inputs of an op with no scalar argument: about 9 MB of ``["","",""]`` on a 500k-event trace)."""
    b = int(base_ns)
    exact = "(({x}) // 1000)::VARCHAR || '.' || lpad((({x}) % 1000)::VARCHAR, 3, '0')"
    fast = "(({x}) / 1000)::DECIMAL(18,3)::VARCHAR"
    for name, x in (("tl_us", f"ns - {b}"), ("tl_dur", "greatest(ns, 0)")):
        con.execute(f"""CREATE OR REPLACE TEMP MACRO {name}(ns) AS CASE WHEN {x} < {_EXACT_DOUBLE_NS}
            THEN {fast.format(x=x)} ELSE {exact.format(x=x)} END""")
    # one "key":value pair, or NULL (concat_ws skips NULLs) so absent values leave no key
    con.execute("CREATE OR REPLACE TEMP MACRO tl_kv(k, v) AS k || v::VARCHAR")
    con.execute("""CREATE OR REPLACE TEMP MACRO _tl_cap(s) AS
        CASE WHEN s IS NULL OR s = '' THEN 'Unknown' ELSE upper(left(s, 1)) || substr(s, 2) END""")
    con.execute("""CREATE OR REPLACE TEMP TABLE tl_str AS
        SELECT id, to_json(value)::VARCHAR AS js,
               CASE WHEN json_valid(value) THEN json(value)::VARCHAR ELSE to_json(value)::VARCHAR END AS raw,
               CASE WHEN regexp_full_match(value, '\\[(""(,"")*)?\\]') THEN NULL
                    WHEN json_valid(value) THEN json(value)::VARCHAR ELSE to_json(value)::VARCHAR END AS given
        FROM strings WHERE value IS NOT NULL""")


def _args(*pairs: str) -> str:
    """SQL for the members of a JSON object from ``tl_kv(...)`` pairs (each 'key':value or NULL)."""
    return "concat_ws(',', " + ", ".join(pairs) + ")"


def _str(alias: str, col: str) -> str:
    return f"LEFT JOIN tl_str {alias} ON {alias}.id = t.{col}"


def _host(
    kind: str,
    table: str,
    where: str,
    layer: str,
    cat: str,
    name: str,
    args: str,
    joins: str = "",
    ph: str = "X",
    per_thread: bool = True,
    corr: str = "NULL::BIGINT",
) -> Source:
    thread = ("coalesce(t.pid, -1)", "coalesce(t.tid, -1)") if per_thread else ("-1", "-1")
    return Source(kind, table, where, ph, ("t.rank", "-1", layer, *thread, "-1"), cat, name, args, joins, corr)


def _gpu(
    kind: str, table: str, where: str, cat: str, name: str, extra_args: tuple[str, ...], joins: str = ""
) -> Source:
    args = _args(
        "tl_kv('\"device\":', t.device)",
        "tl_kv('\"stream\":', t.stream)",
        "tl_kv('\"correlation\":', t.correlation_id)",
        "tl_kv('\"External id\":', t.external_id)",
        *extra_args,
        "tl_kv('\"step\":', t.step)",
    )
    keys = ("t.rank", "coalesce(t.device, -2)", str(LAYER_STREAM), "-1", "-1", "coalesce(t.stream, -1)")
    return Source(kind, table, where, "X", keys, f"'\"{cat}\"'", name, args, joins, "t.correlation_id")


def sources(window: StepWindow | None) -> list[Source]:
    """Every kind of event of the timeline, restricted to ``window``'s steps."""
    w = window.sql("t.step") if window else "TRUE"
    sync_name = (
        "CASE t.kind " + " ".join(f"WHEN '{k}' THEN '\"{v}\"'" for k, v in _SYNC_NAMES.items()) + " ELSE '\"Sync\"' END"
    )
    units = " ".join(f"WHEN {_lit(m)} THEN {_lit(u)}" for m, (u, _) in METRICS.items())
    phase_layer = f"CASE WHEN t.source = 'derived' THEN {LAYER_DERIVED} ELSE {LAYER_PHASES} END"
    phase_args = _args(
        "tl_kv('\"source\":', to_json(t.source))", "tl_kv('\"domain\":', d.js)", "tl_kv('\"step\":', t.step)"
    )
    phase_joins = f"{_str('n', 'name_id')} {_str('d', 'domain_id')}"
    return [
        _host(
            "step",
            "steps",
            w,
            str(LAYER_STEPS),
            "'\"user_annotation\"'",
            "to_json('ProfilerStep#' || t.step)",
            _args(
                "tl_kv('\"step\":', t.step)",
                "tl_kv('\"warmup\":', t.warmup)",
                "tl_kv('\"source\":', to_json(t.source))",
            ),
            per_thread=False,
        ),
        _host(
            "phase",
            "phases",
            f"t.kind = 'range' AND {w}",
            phase_layer,
            "CASE WHEN t.source = 'derived' THEN '\"dlscope_derived\"' ELSE '\"user_annotation\"' END",
            "n.js",
            phase_args,
            phase_joins,
        ),
        _host(
            "mark",
            "phases",
            f"t.kind = 'mark' AND {w}",
            phase_layer,
            "'\"user_annotation\"'",
            "n.js",
            phase_args,
            phase_joins,
            ph="i",
        ),
        # module calls: Kineto's category for nn.Module events (with_modules), which the Kineto importer
        # leaves out (the module_calls table comes from dlscope's own recordings only)
        _host(
            "module",
            "module_calls",
            w,
            str(LAYER_MODULES),
            "'\"python_function\"'",
            "n.js",
            _args("tl_kv('\"module type\":', ty.js)", "tl_kv('\"step\":', t.step)"),
            f"{_str('n', 'name_id')} {_str('ty', 'type_id')}",
        ),
        _host(
            "op",
            "ops",
            w,
            str(LAYER_OPS),
            "coalesce(to_json(t.category), '\"cpu_op\"')",
            "n.js",
            _args(
                "tl_kv('\"External id\":', t.external_id)",
                "tl_kv('\"Sequence number\":', t.sequence_nr)",
                "tl_kv('\"Fwd thread id\":', t.fwd_tid)",
                "tl_kv('\"Input Dims\":', s.raw)",
                "tl_kv('\"Input type\":', ty.raw)",
                "tl_kv('\"Concrete Inputs\":', v.given)",
                "tl_kv('\"step\":', t.step)",
            ),
            f"{_str('n', 'name_id')} {_str('s', 'input_shapes_id')} {_str('ty', 'input_types_id')} "
            f"{_str('v', 'input_values_id')}",
        ),
        _host(
            "api",
            "api",
            w,
            str(LAYER_API),
            "CASE WHEN t.kind = 'driver' THEN '\"cuda_driver\"' ELSE '\"cuda_runtime\"' END",
            "n.js",
            _args(
                "tl_kv('\"cbid\":', t.cbid)",
                "tl_kv('\"correlation\":', t.correlation_id)",
                "tl_kv('\"External id\":', t.external_id)",
                "tl_kv('\"step\":', t.step)",
            ),
            _str("n", "name_id"),
            corr="t.correlation_id",
        ),
        _host(
            "sync",
            "sync",
            w,
            str(LAYER_SYNC),
            "'\"cuda_sync\"'",
            sync_name,
            _args(
                "tl_kv('\"device\":', t.device)",
                "tl_kv('\"stream\":', t.stream)",
                "tl_kv('\"correlation\":', t.correlation_id)",
                f"tl_kv('\"cuda_sync_kind\":', {sync_name})",
                "tl_kv('\"step\":', t.step)",
            ),
        ),
        _gpu(
            "kernel",
            "kernels",
            w,
            "kernel",
            "n.js",
            (
                (
                    "CASE WHEN t.grid_x IS NOT NULL THEN '\"grid\":[' || t.grid_x || ',' || coalesce(t.grid_y, 1) ||"
                    " ',' || coalesce(t.grid_z, 1) || ']' END"
                ),
                (
                    "CASE WHEN t.block_x IS NOT NULL THEN '\"block\":[' || t.block_x || ',' || coalesce(t.block_y, 1) "
                    "|| ',' || coalesce(t.block_z, 1) || ']' END"
                ),
                "tl_kv('\"registers per thread\":', t.registers)",
                "tl_kv('\"shared memory\":', t.shared_bytes)",
            ),
            _str("n", "name_id"),
        ),
        # names as Kineto writes them, so that the importer recovers copy and memory kinds
        _gpu(
            "memcpy",
            "memcpy",
            w,
            "gpu_memcpy",
            "to_json('Memcpy ' || t.copy_kind || ' (' || _tl_cap(t.src_kind) || ' -> ' || _tl_cap(t.dst_kind) || ')')",
            ("tl_kv('\"bytes\":', t.bytes)",),
        ),
        _gpu(
            "memset",
            "memset",
            w,
            "gpu_memset",
            "to_json('Memset (' || _tl_cap(t.mem_kind) || ')')",
            ("tl_kv('\"bytes\":', t.bytes)",),
        ),
        Source(
            "counter",
            "counters",
            f"isfinite(t.value) AND {w}",
            "C",
            (
                "t.rank",
                "CASE WHEN t.device IS NULL OR t.device < 0 THEN -1 ELSE t.device END",
                str(LAYER_COUNTER),
                "-1",
                "-1",
                "-1",
            ),
            "NULL",
            "to_json(m.value)",
            f"to_json(CASE m.value {units} ELSE 'value' END) || ':' || t.value::VARCHAR",
            "LEFT JOIN strings m ON m.id = t.metric_id",
            start="t.ts_ns",
            end="t.ts_ns",
        ),
    ]


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"
