"""Names of communication work, shared by the importers (which make the ``comms`` table) and the
analysis (which tells communication kernels from compute): the kernel-name patterns, the
normalized collective names, and element sizes. Plain constants and SQL text, no imports.

Normalized names follow nccl-tests (``allreduce``, ``allgather``, ``reducescatter``,
``broadcast``, ``reduce``, ``alltoall``, ``sendrecv``): PyTorch spells them ``all_reduce``,
``_allgather_base``, ``allgather_into_tensor_coalesced`` ..., NCCL's kernels ``AllReduce``.
"""

from __future__ import annotations

# kernels that are communication (case-insensitive, DuckDB's RE2 dialect)
COMMUNICATION_PATTERNS: tuple[str, ...] = (
    r"^(void )?(nccl|rccl)\w*kernel",  # ncclDevKernel_AllReduce_..., ncclKernel_...
    r"^(void )?(\w+::)*msccl",  # MSCCL / MSCCL++ kernels
    r"nvshmem",  # NVSHMEM collectives and puts
    r"(cross_device_reduce|one_shot_all_reduce|two_shot_all_reduce|multimem_all_reduce)",
)
COMMUNICATION_RE = "|".join(f"({p})" for p in COMMUNICATION_PATTERNS)

COLLECTIVES: tuple[str, ...] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
    "sendrecv",
    "send",
    "recv",
    "reduce",
    "barrier",
    "gather",
    "scatter",
)

# bytes per element, by the lower-cased type name as PyTorch's profiler writes it (c10 names in
# "Input type", ATen scalar type names in "dtype")
DTYPE_BYTES: dict[int, tuple[str, ...]] = {
    8: ("double", "float64", "long", "long int", "int64", "uint64", "long long", "complexfloat", "c10::complex<float>"),
    4: ("float", "float32", "int", "int32", "uint32", "unsigned int"),
    2: ("half", "c10::half", "bfloat16", "c10::bfloat16", "float16", "short", "short int", "int16", "uint16"),
    1: (
        "byte",
        "char",
        "unsigned char",
        "signed char",
        "bool",
        "int8",
        "uint8",
        "float8_e4m3fn",
        "float8_e5m2",
        "c10::float8_e4m3fn",
        "c10::float8_e5m2",
    ),
}


def normalize_sql(expr: str) -> str:
    """SQL: a collective's normalized name from a library's spelling of it (``expr`` is text)."""
    n = f"regexp_replace(lower(coalesce({expr}, '')), '[^a-z]', '', 'g')"
    # order matters: 'reducescatter' before 'reduce', 'sendrecv' before 'send'
    cases = " ".join(f"WHEN {n} LIKE '{c}%' THEN '{c}'" for c in COLLECTIVES)
    return f"(CASE WHEN {n} = '' THEN NULL {cases} ELSE {n} END)"


def kernel_collective_sql(name: str) -> str:
    """SQL: the operation a communication kernel runs, from its name (NCCL/RCCL spell it after
    ``Kernel_``: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``); NULL when the name does not say."""
    return normalize_sql(f"nullif(regexp_extract({name}, '(?i)kernel_([a-z]+)', 1), '')")


def backend_sql(name: str) -> str:
    """SQL: the library of a communication kernel, from its name."""
    n = f"lower({name})"
    return (
        f"CASE WHEN regexp_matches({n}, '^(void )?rccl') THEN 'rccl' "
        f"WHEN regexp_matches({n}, 'msccl') THEN 'msccl' WHEN regexp_matches({n}, 'nvshmem') THEN 'nvshmem' "
        f"WHEN regexp_matches({n}, '^(void )?nccl') THEN 'nccl' ELSE 'custom' END"
    )


def dtype_bytes_sql(expr: str) -> str:
    """SQL: bytes per element of a type name; NULL when unknown."""
    t = f"lower(trim(coalesce({expr}, '')))"
    cases = " ".join(
        f"WHEN {t} IN ({', '.join(repr(n) for n in names)}) THEN {size}" for size, names in DTYPE_BYTES.items()
    )
    return f"(CASE {cases} END)"


def bus_factor_sql(name: str, n: str) -> str:
    """SQL: nccl-tests' bus-bandwidth factor of a collective over ``n`` ranks (busbw = algbw *
    factor; see nccl-tests' doc/PERFORMANCE.md): allreduce 2(n-1)/n; allgather, reducescatter
    and alltoall (n-1)/n; everything else (broadcast, reduce, point-to-point) 1."""
    return (
        f"(CASE WHEN {n} IS NULL OR {n} < 1 THEN NULL "
        f"WHEN {name} = 'allreduce' THEN 2.0 * ({n} - 1) / {n} "
        f"WHEN {name} IN ('allgather', 'reducescatter', 'alltoall') THEN 1.0 * ({n} - 1) / {n} ELSE 1.0 END)"
    )


# Below 1 MiB NCCL's all-reduce is latency-bound: its bus bandwidth collapses (nccl-tests' curves)
SMALL_BYTES = 1 << 20


def size_bytes_sql(name: str, in_bytes: str, out_bytes: str, n: str) -> str:
    """SQL: the message size nccl-tests reports for an operation (its "size" column, which its
    bandwidths divide): the whole gathered output for allgather, the whole input for
    reducescatter, else the input (a rank's buffer)."""
    return (
        f"(CASE WHEN {name} = 'allgather' THEN coalesce({out_bytes}, {in_bytes} * {n}) "
        f"WHEN {name} = 'reducescatter' THEN coalesce({in_bytes}, {out_bytes} * {n}) "
        f"ELSE coalesce({in_bytes}, {out_bytes}) END)"
    )
