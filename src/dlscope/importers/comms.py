"""The ``comms`` table from a Kineto trace: every collective and point-to-point operation.

Two sources, because the trace records communication where it ran:

* GPU communication kernels (NCCL, RCCL ...). Recent PyTorch puts the collective's arguments on
  the kernel itself (``Collective name``, ``In msg nelems``, ``dtype``, ``Process Group ...``), or
  only on the ``record_param_comms`` op that launched it (same External id); older traces say
  nothing, and the operation comes from the kernel's name (``ncclKernel_AllReduce_...``).
* Gloo's worker threads, which wrap each operation in a ``gloo:<op>`` annotation whose input
  shapes and types give its size (PyTorch's CPU collectives).
"""

from __future__ import annotations

from ..vocabulary.collectives import (
    COMMUNICATION_RE,
    backend_sql,
    dtype_bytes_sql,
    kernel_collective_sql,
    normalize_sql,
)


def comms_sql(ev: str, launch: str, rank: int, world_size: int | None, host_pid: int | None) -> str:
    """SQL over the normalized events ``ev`` (see kineto._create_ev) giving comms rows."""
    world = "NULL" if world_size is None else str(int(world_size))
    pid = "NULL" if host_pid is None else str(int(host_pid))
    # the op's "Input type"/"Input Dims" as the trace gave them: text that is not JSON (an empty
    # string, a damaged trace) gives no size rather than failing the import (json_extract raises)
    gloo_type = "CASE WHEN json_valid(e.input_types) THEN json_extract_string(e.input_types, '$[0]') END"
    gloo_nelems = (
        "list_aggregate(TRY_CAST(CASE WHEN json_valid(e.input_shapes) THEN json_extract(e.input_shapes, '$[0]') "
        "END AS BIGINT[]), 'product')::BIGINT"
    )
    return f"""
    WITH params AS (
        SELECT external_id, any_value(coll_name) AS coll_name, any_value(in_nelems) AS in_nelems,
               any_value(out_nelems) AS out_nelems, any_value(group_size) AS group_size,
               any_value(coll_dtype) AS coll_dtype, any_value(pg_name) AS pg_name, any_value(pg_ranks) AS pg_ranks
        FROM {ev} WHERE name = 'record_param_comms' AND coll_name IS NOT NULL AND external_id IS NOT NULL
        GROUP BY ALL),
    k AS (
        SELECT e.*, coalesce(e.coll_name, p.coll_name) AS c_name, coalesce(e.in_nelems, p.in_nelems) AS c_in,
               coalesce(e.out_nelems, p.out_nelems) AS c_out, coalesce(e.group_size, p.group_size) AS c_size,
               coalesce(e.coll_dtype, p.coll_dtype) AS c_dtype, coalesce(e.pg_name, p.pg_name) AS c_pg,
               coalesce(e.pg_ranks, p.pg_ranks) AS c_ranks
        FROM {ev} e LEFT JOIN params p ON p.external_id = e.external_id
        WHERE e.ph = 'X' AND e.cat = 'kernel' AND e.name IN (
            -- the pattern is tried once per distinct kernel name, not once per kernel
            SELECT name FROM (SELECT DISTINCT name FROM {ev} WHERE ph = 'X' AND cat = 'kernel')
            WHERE regexp_matches(lower(name), '{COMMUNICATION_RE}')))
    SELECT {rank} AS rank, coalesce(l.pid, {pid}) AS pid, l.tid, coalesce(k.device_arg, k.pid_int) AS device,
           coalesce(k.stream_arg, k.tid_int) AS stream, k.start_ns, k.start_ns + k.dur_ns AS end_ns,
           coalesce({normalize_sql("k.c_name")}, {kernel_collective_sql("k.name")}, 'unknown') AS name,
           {backend_sql("k.name")} AS backend, 'gpu' AS "where",
           k.c_in * {dtype_bytes_sql("k.c_dtype")} AS in_bytes, k.c_out * {dtype_bytes_sql("k.c_dtype")} AS out_bytes,
           k.c_dtype AS dtype, k.c_pg AS group_name, k.c_ranks AS group_ranks,
           coalesce(k.c_size, {world}) AS group_size, k.correlation_id, k.external_id
    FROM k LEFT JOIN {launch} l ON l.correlation_id = k.correlation_id
    UNION ALL
    SELECT {rank}, e.pid_int, e.tid_int, NULL, NULL, e.start_ns, e.start_ns + e.dur_ns,
           coalesce({normalize_sql("substr(e.name, 6)")}, 'unknown'), 'gloo', 'host',
           {gloo_nelems} * {dtype_bytes_sql(gloo_type)}, NULL, {gloo_type}, NULL, NULL, {world}, NULL, e.external_id
    FROM {ev} e WHERE e.ph = 'X' AND e.cat = 'user_annotation' AND e.name LIKE 'gloo:%'"""
