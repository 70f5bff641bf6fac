"""The profile format: every table, its columns and their units, in one place.

A profile is a directory ``NAME.dlscope/`` holding ``meta.json`` and one Parquet file per table
(``TABLE.parquet``; ``TABLE.rankN.parquet`` when several ranks were recorded separately). It is the
contract between recording and analysis: every report is computed from these tables alone.

Conventions (they hold for every table):

* Times are int64 nanoseconds since the Unix epoch (``*_ns``); durations are ``end_ns - start_ns``.
  Every collector converts to this clock when it records and writes the offset it used to
  ``meta.json`` (``clock``).
* Sizes are int64 bytes. Rates and percentages are stored only in ``counters``, with the unit in
  :data:`METRICS`.
* Names (ops, kernels, API calls, phases, metrics, shapes) are interned once in ``strings`` and
  referred to by ``*_id`` int32 columns; the DuckDB views made by the reader add the decoded
  ``name`` column.
* ``rank`` is the distributed rank (0 for a single process), from the launcher's environment
  (``RANK``, as torchrun and ``accelerate launch`` set it) or from ``torch.distributed`` once the
  process group exists (``mp.spawn``); every rank of a job is one profile on one clock.
  ``step`` is the iteration an event
  belongs to (NULL outside any step); ``correlation_id`` links a CUDA API call to the GPU activity
  it caused (CUPTI's correlation id); ``external_id`` links a framework op to the API calls and
  GPU activity it caused (Kineto's "External id").
* Small enumerations (copy kinds, sources) are plain strings, dictionary-encoded on disk.

Bump :data:`FORMAT_VERSION` on any incompatible change; readers refuse newer major versions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .version import FORMAT_NAME, FORMAT_VERSION  # noqa: F401 - re-exported

if TYPE_CHECKING:
    import pyarrow as pa

# Column types by their Arrow names. The schema itself imports no pyarrow: importing a trace runs
# entirely in DuckDB, and pyarrow costs 0.15 s and 50 MB to load.
I8, I16, I32, I64, F64, STR, BOOL = "int8", "int16", "int32", "int64", "double", "string", "bool"
DUCK_TYPES = {
    I8: "TINYINT",
    I16: "SMALLINT",
    I32: "INTEGER",
    I64: "BIGINT",
    F64: "DOUBLE",
    STR: "VARCHAR",
    BOOL: "BOOLEAN",
}


def arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    return pa.type_for_alias(name)


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # Arrow type name (one of I8 ... BOOL)
    doc: str
    nullable: bool = True

    @property
    def type(self) -> pa.DataType:
        return arrow_type(self.dtype)

    @property
    def duck(self) -> str:
        return DUCK_TYPES[self.dtype]


@dataclass(frozen=True)
class Table:
    name: str
    layer: str  # application | framework | runtime | hardware | (internal)
    doc: str
    columns: tuple[Column, ...]
    sort_by: tuple[str, ...] = ()

    @property
    def schema(self) -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns])

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


def _c(name: str, type_: str, doc: str, nullable: bool = True) -> Column:
    return Column(name, type_, doc, nullable)


RANK = _c("rank", I32, "distributed rank of the process that recorded the row", False)
PID = _c("pid", I64, "operating-system process id")
TID = _c("tid", I64, "operating-system or framework thread id")
DEVICE = _c("device", I32, "GPU index as the process saw it")
STREAM = _c("stream", I64, "CUDA stream id")
CONTEXT = _c("context", I32, "CUDA context id")
START = _c("start_ns", I64, "start, ns since the Unix epoch", False)
END = _c("end_ns", I64, "end, ns since the Unix epoch", False)
NAME = _c("name_id", I32, "name, an id in strings", False)
CORR = _c("correlation_id", I64, "CUDA correlation id (API call <-> GPU activity)")
EXT = _c("external_id", I64, "framework correlation id (op <-> API call <-> GPU activity)")
STEP = _c("step", I32, "iteration the row belongs to; NULL outside any step")

STRINGS = Table(
    "strings",
    "(internal)",
    "Interned names; every *_id column refers to id here.",
    (_c("id", I32, "string id", False), _c("value", STR, "the string", False)),
    sort_by=("id",),
)

PHASES = Table(
    "phases",
    "application",
    "Application phases (ranges) and instant marks: dlscope's own API, NVTX ranges, "
    "record_function annotations, and phases derived from framework events "
    "(data loading, forward, backward, optimizer).",
    (
        RANK,
        PID,
        TID,
        START,
        END,
        NAME,
        _c("depth", I16, "nesting depth on its thread, 0 = outermost"),
        _c("kind", STR, "'range' or 'mark' (a mark has end_ns = start_ns)", False),
        _c(
            "source",
            STR,
            "'dlscope', 'hook' (dataloader, forward, backward, optimizer and sync timed in every step by "
            "PyTorch hooks, see capture.torch_hooks), 'nvtx', 'record_function' or 'derived'",
            False,
        ),
        _c("domain_id", I32, "NVTX domain or annotation category, an id in strings"),
        STEP,
        _c(
            "style",
            STR,
            "'pushpop' (nested on its thread) or 'startend' (may overlap others and end on "
            "another thread, as NVTX start/end ranges); NULL: nested, as push/pop",
        ),
    ),
    sort_by=("rank", "start_ns"),
)

PHASE_GPU = Table(
    "phase_gpu",
    "application",
    "GPU time of the hook phases (forward, backward, optimizer) in every step, traced or not: CUDA "
    "events recorded on the launching thread's current stream at the phase's start and end, read "
    "back without synchronizing (capture.phase_events). start_ns/end_ns are the host phase's.",
    (
        RANK,
        PID,
        TID,
        START,
        END,
        NAME,
        _c("device", I32, "CUDA device of the stream the events were recorded on"),
        _c(
            "gpu_start_ns",
            I64,
            "when the GPU reached the phase's start marker (its first work could start), on the "
            "host clock through one synchronized anchor event",
            nullable=False,
        ),
        _c(
            "gpu_end_ns",
            I64,
            "when the GPU reached the phase's end marker: everything launched before it on that "
            "stream was done (gpu_end_ns - gpu_start_ns is the phase's GPU span)",
            nullable=False,
        ),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

STEPS = Table(
    "steps",
    "application",
    "Iterations: from dlscope's step(), ProfilerStep#N, an optimizer step or a key node.",
    (
        RANK,
        _c("step", I32, "iteration number", False),
        START,
        END,
        PID,
        TID,
        _c(
            "source",
            STR,
            "'dlscope', 'profiler_step' (ProfilerStep#N, JAX/TF step annotations), 'optimizer', "
            "'key_node', 'session_run' (a TF1 Session.run) or 'jit_executable' (the runs of a JAX program's "
            "repeated jit executable, where it marked no steps)",
            False,
        ),
        _c("warmup", BOOL, "warm-up iteration, excluded from statistics by default", False),
        _c(
            "traced",
            BOOL,
            "detailed tracing (framework ops, runtime calls, kernels) ran during this step, "
            "so its duration includes that overhead",
        ),
    ),
    sort_by=("rank", "step"),
)

OPS = Table(
    "ops",
    "framework",
    "Framework operators (PyTorch aten ops, autograd functions, TF/JAX ops).",
    (
        RANK,
        PID,
        TID,
        START,
        END,
        NAME,
        _c("op_id", I64, "unique per rank; parent_id refers to it", False),
        _c("parent_id", I64, "enclosing op on the same thread, NULL at top level"),
        _c("depth", I16, "nesting depth among ops on its thread"),
        _c("self_ns", I64, "duration minus the durations of direct child ops"),
        EXT,
        _c("sequence_nr", I64, "autograd sequence number: links a forward op to its backward"),
        _c("fwd_tid", I64, "thread of the forward op, for backward ops"),
        _c("input_shapes_id", I32, "input shapes as text, an id in strings"),
        _c("input_types_id", I32, "input dtypes as text, an id in strings"),
        _c("category", STR, "'cpu_op' or another framework category"),
        STEP,
        _c(
            "source_id",
            I32,
            "where the op comes from, an id in strings: the framework's op path and the "
            "program's source line when the framework records them (JAX: 'jit(f)/jvp()/dot_general "
            "(train.py:26 loss_fn)')",
        ),
        _c(
            "input_values_id",
            I32,
            "the values of the inputs that are not tensors (scalars, lists, flags) as text, "
            "an id in strings: PyTorch's 'Concrete Inputs', one JSON string per input, '' for "
            "a tensor or an input not recorded",
        ),
    ),
    sort_by=("rank", "start_ns"),
)

# Module calls get a table of their own rather than phases with another source: the phases feed the
# phase breakdown, the host classes, the forward-pass merge and the timeline, which thousands of
# module ranges a step would clutter and slow, and a call has a class (``type``) phases have no
# column for.
MODULE_CALLS = Table(
    "module_calls",
    "framework",
    "Forward calls of torch.nn.Module objects, recorded by global module hooks in the traced steps after the "
    "warm-up only (capture.module_calls): one row per call. Backward work is attributed to modules at "
    "analysis through the autograd sequence numbers of the ops. Absent from profiles written before it "
    "(read as empty).",
    (
        RANK,
        PID,
        TID,
        START,
        END,
        _c(
            "name_id",
            I32,
            "the module's path: its root module's class name, then the attribute names down the modules "
            "that called it ('GPT.transformer.h.3.attn'), an id in strings",
            False,
        ),
        _c("type_id", I32, "the module's class name ('Linear'), an id in strings"),
        _c("depth", I16, "nesting depth among the module calls of its thread, 0 = a root module's call"),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

API = Table(
    "api",
    "runtime",
    "CUDA runtime and driver API calls made by the host (launches, copies, synchronization).",
    (
        RANK,
        PID,
        TID,
        START,
        END,
        NAME,
        CORR,
        EXT,
        _c("cbid", I32, "CUPTI callback id"),
        _c("kind", STR, "'runtime' or 'driver'", False),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

KERNELS = Table(
    "kernels",
    "hardware",
    "GPU kernel executions.",
    (
        RANK,
        DEVICE,
        STREAM,
        CONTEXT,
        START,
        END,
        NAME,
        CORR,
        EXT,
        _c("grid_x", I32, "grid size"),
        _c("grid_y", I32, ""),
        _c("grid_z", I32, ""),
        _c("block_x", I32, "block size"),
        _c("block_y", I32, ""),
        _c("block_z", I32, ""),
        _c("registers", I32, "registers per thread"),
        _c("shared_bytes", I64, "shared memory per block, static + dynamic"),
        _c("static_shared_bytes", I64, "static shared memory per block, when known"),
        _c("dynamic_shared_bytes", I64, "dynamic shared memory per block, when known"),
        _c("pid", I64, "host process that launched it"),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

MEMCPY = Table(
    "memcpy",
    "hardware",
    "GPU memory copies.",
    (
        RANK,
        DEVICE,
        STREAM,
        CONTEXT,
        START,
        END,
        CORR,
        EXT,
        _c("bytes", I64, "bytes copied", False),
        _c(
            "copy_kind",
            STR,
            "'HtoD', 'DtoH', 'DtoD', 'HtoH', 'PtoP', 'unknown', or for CUDA arrays and "
            "unified memory 'HtoA', 'AtoH', 'AtoA', 'AtoD', 'DtoA', 'UVM_HtoD', 'UVM_DtoH', "
            "'UVM_DtoD'",
            False,
        ),
        _c(
            "src_kind",
            STR,
            "'pageable', 'pinned', 'device', 'managed', 'array', 'device_static', 'managed_static' or 'unknown'",
        ),
        _c("dst_kind", STR, "same values as src_kind"),
        _c("pid", I64, "host process that issued it"),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

MEMSET = Table(
    "memset",
    "hardware",
    "GPU memory sets.",
    (
        RANK,
        DEVICE,
        STREAM,
        CONTEXT,
        START,
        END,
        CORR,
        EXT,
        _c("bytes", I64, "bytes set", False),
        _c("mem_kind", STR, "same values as memcpy's src_kind"),
        _c("pid", I64, "host process that issued it"),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

SYNC = Table(
    "sync",
    "runtime",
    "Host-side waits on the GPU (stream, event, context synchronization, stream-wait-event).",
    (
        RANK,
        PID,
        TID,
        DEVICE,
        STREAM,
        START,
        END,
        CORR,
        _c("kind", STR, "'stream', 'event', 'context', 'stream_wait_event' or 'unknown'", False),
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

COMMS = Table(
    "comms",
    "framework",
    "Collective and point-to-point communication (NCCL, RCCL, Gloo): one row per operation as it ran, "
    "on the GPU (a communication kernel) or on a host thread (Gloo's worker threads), with its "
    "message sizes and process group where the trace says them.",
    (
        RANK,
        PID,
        TID,
        DEVICE,
        STREAM,
        START,
        END,
        _c(
            "name_id",
            I32,
            "the operation, normalized: 'allreduce', 'allgather', 'reducescatter', 'broadcast', "
            "'reduce', 'alltoall', 'sendrecv', 'send', 'recv', 'barrier', 'gather', 'scatter' "
            "(or the library's own name when none of these), an id in strings",
            False,
        ),
        _c("backend", STR, "'nccl', 'rccl', 'gloo' or another library"),
        _c("where", STR, "'gpu': a GPU kernel ran it (device, stream set); 'host': a host thread did (tid set)", False),
        _c(
            "in_bytes",
            I64,
            "bytes of this rank's input (for allgather its share; for reducescatter the whole "
            "input), NULL when the trace does not say",
        ),
        _c("out_bytes", I64, "bytes of this rank's output (for allgather the whole gathered output)"),
        _c("dtype", STR, "element type as the trace names it"),
        _c("group_name", STR, "process group (communicator) name"),
        _c("group_ranks", STR, "global ranks of the process group, as text ('[0, 1]'), when known"),
        _c("group_size", I32, "ranks in the process group (the world size when the trace names no group)"),
        CORR,
        EXT,
        STEP,
    ),
    sort_by=("rank", "start_ns"),
)

COUNTERS = Table(
    "counters",
    "hardware",
    "Sampled counters: NVML/GPM GPU metrics, memory timelines. Units per metric in METRICS.",
    (
        RANK,
        DEVICE,
        _c("ts_ns", I64, "sample time, ns since the Unix epoch", False),
        _c("metric_id", I32, "metric name, an id in strings", False),
        _c("value", F64, "value in the metric's unit", False),
        STEP,
    ),
    sort_by=("rank", "metric_id", "ts_ns"),
)

KERNEL_METRICS = Table(
    "kernel_metrics",
    "hardware",
    "Per-kernel metrics measured by Nsight Compute (ncu) on chosen launches: one row per profiled launch "
    "and metric. Joined to kernels by name (and launch order). Absent from profiles written before it "
    "existed (read as empty).",
    (
        RANK,
        DEVICE,
        NAME,
        _c("launch", I32, "ncu's id of the profiled launch (its ID column): 0, 1, ... in launch order", False),
        _c("section_id", I32, "ncu section the metric belongs to, an id in strings"),
        _c("metric_id", I32, "metric name as ncu reports it, an id in strings", False),
        _c("value", F64, "value in unit; ncu's scaled units converted to the base unit (ns, byte, byte/s, hz)"),
        _c("unit", STR, "ns, byte, byte/s, hz, %, cycle, ... (as ncu names base units); NULL: a count"),
        _c("pid", I64, "host process that launched it"),
    ),
    sort_by=("rank", "launch", "metric_id"),
)

TRIES = Table(
    "tries",
    "advice",
    "dlscope try: one row per fix tried on the program, with the saving measured by running it with the fix "
    "applied (alternated with unchanged runs) and the saving the advice predicted for it, so that a query over "
    "many tries gives the estimates' errors. Written into the baseline run's profile; absent elsewhere.",
    (
        _c("fix", STR, "the fix (dlscope try --fixes names)", False),
        _c("rules", STR, "the advice rules whose change it is, comma-separated"),
        _c("applied", BOOL, "the fix applied in every run with it", False),
        _c("reason", STR, "why it did not apply, or why its run failed"),
        _c("changes_precision", BOOL, "the fix changes numerics (autocast, TF32)"),
        _c(
            "predicted_saving_pct",
            F64,
            "the advice's predicted saving on the baseline, % of its step (NULL: no finding)",
        ),
        _c("measured_saving_pct", F64, "measured saving of the median step, % of the baseline's median step"),
        _c(
            "measured_low_pct",
            F64,
            "interval of the measured saving, low end: Student's t over the rounds' ratios, with a verdict the look's"
            " repeated confidence interval (corrected for looking after every round; --repeat: 95%); without one, 95%"
            " (one round: the steps' bootstrap)",
        ),
        _c("measured_high_pct", F64, "interval of the measured saving, high end"),
        _c(
            "p_value",
            F64,
            "p of the verdict: with a verdict the rounds' paired t; without one, the larger of the steps' Mann-Whitney"
            " U and the rounds' paired t (both must reject; one round: the steps' test)",
        ),
        _c(
            "alpha",
            F64,
            "the level p_value is held to: the look's nominal level with sequential rounds (alpha spending), else 0.05",
        ),
        _c(
            "significant",
            BOOL,
            "with a verdict: saves or costs; without one, the steps' Mann-Whitney test and the rounds' paired t test"
            " both reject no change (p < 0.05)",
        ),
        _c(
            "verdict",
            STR,
            "the rounds' verdict: saves, costs (interval excludes zero), no effect (interval within -5..+5%), undecided"
            " (max rounds reached); NULL: none (--repeat 1, a fix not measured, profiles before it)",
        ),
        _c("rounds", I32, "rounds the verdict rests on: rounds with both a run with the fix and a baseline run"),
        _c(
            "agrees",
            BOOL,
            "the prediction holds: within 0.5x..2x of a significant saving or inside its interval (or both under 2%);"
            " NULL: undecided",
        ),
        _c("loss_diverged", BOOL, "the fixed runs' loss became NaN/inf or left the stated tolerance"),
        _c("baseline_ms", F64, "median step of the baseline runs, ms"),
        _c("fixed_ms", F64, "median step of the fixed runs, ms"),
        _c("runs", I32, "runs with the fix"),
        _c("steps", I32, "measured steps with the fix, over all its runs"),
    ),
    sort_by=("fix",),
)

# Tables and columns a profile may lack (written before they existed): read as empty / NULL.
OPTIONAL_TABLES = ("comms", "kernel_metrics", "tries", "phase_gpu", "module_calls")
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "ops": ("source_id", "input_values_id"),
    "tries": ("alpha", "verdict", "rounds"),
}

# Text columns that the builder interns and the reader's views decode: text column -> id column.
NAME_COLUMNS: dict[str, dict[str, str]] = {
    "phases": {"name": "name_id", "domain": "domain_id"},
    "phase_gpu": {"name": "name_id"},
    "ops": {
        "name": "name_id",
        "input_shapes": "input_shapes_id",
        "input_types": "input_types_id",
        "source": "source_id",
        "input_values": "input_values_id",
    },
    "module_calls": {"name": "name_id", "type": "type_id"},
    "api": {"name": "name_id"},
    "kernels": {"name": "name_id"},
    "counters": {"metric": "metric_id"},
    "comms": {"name": "name_id"},
    "kernel_metrics": {"name": "name_id", "section": "section_id", "metric": "metric_id"},
}

TABLES: tuple[Table, ...] = (
    STRINGS,
    PHASES,
    PHASE_GPU,
    STEPS,
    OPS,
    MODULE_CALLS,
    API,
    KERNELS,
    MEMCPY,
    MEMSET,
    SYNC,
    COMMS,
    COUNTERS,
    KERNEL_METRICS,
    TRIES,
)
TABLES_BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}

# Which tables carry each layer's data (used to say which layers a profile holds).
LAYER_TABLES: dict[str, tuple[str, ...]] = {
    "application": ("phases", "steps", "phase_gpu"),
    "framework": ("ops", "comms", "module_calls"),
    "runtime": ("api", "sync"),
    "hardware": ("kernels", "memcpy", "memset", "counters", "kernel_metrics"),
}

# Counter metrics: name -> (unit, description). A collector may add metrics not listed here; they
# are shown with their name only.
METRICS: dict[str, tuple[str, str]] = {
    "gpu_util": ("%", "NVML GPU utilization: share of the sample period a kernel ran"),
    "mem_util": ("%", "NVML memory utilization: share of the sample period device memory was read or written"),
    "mem_used": ("bytes", "device memory in use"),
    "power": ("W", "board power draw"),
    "sm_clock": ("MHz", "SM clock"),
    "mem_clock": ("MHz", "memory clock"),
    "temperature": ("C", "GPU temperature"),
    "throttle_reasons": ("bitmask", "NVML clocks-event (throttle) reasons"),
    "sm_active": ("%", "GPM SM activity"),
    "sm_occupancy": ("%", "GPM SM occupancy (resident warps / max)"),
    "tensor_active": ("%", "GPM tensor-core activity (any precision)"),
    "dram_bw_util": ("%", "GPM DRAM bandwidth utilization"),
    "pcie_tx": ("bytes/s", "GPM PCIe transmit throughput"),
    "pcie_rx": ("bytes/s", "GPM PCIe receive throughput"),
    "nvlink_tx": ("bytes/s", "GPM NVLink transmit throughput"),
    "nvlink_rx": ("bytes/s", "GPM NVLink receive throughput"),
}


# ---- malformed rows ---------------------------------------------------------------------------
# The rule both the builder (rows not stored, counted in a note) and the reader (rows of a damaged
# or foreign file not read) apply to every table's times; docs/format.md states it (see describe).

MAX_TIME_NS = (1 << 62) - 1  # the latest time a row may have: 2**62 ns after the epoch is year 2116
MAX_DURATION_NS = 1 << 52  # the longest a row may last: about 52 days
TIME_RULE = (
    "A row whose `start_ns`, `end_ns` or `ts_ns` lies outside `[0, 2**62)` ns (before the epoch or after "
    "2116), whose end is before its start, or which lasts more than `2**52` ns (about 52 days) is "
    "malformed: no collector records one, and its times would overflow int64 in the sums the reports "
    "take. An importer that lets one through does not store it (`dlscope import` notes how many per "
    "table); the reader leaves them out of a damaged or foreign file, as it does rows with NULL in a "
    "required column (it checks the times of a table whose Parquet statistics do not show all of them "
    "within `[0, 2**62)` and within `2**52` ns of each other, which rules out all but an end before the "
    "start). With every time in range and no row longer than `2**52` ns, a sum of "
    "durations overflows int64 only past 2,048 rows of the maximum length."
)
# what the importers and the reader make of other malformed values (docs/format.md)
VALUE_RULE = (
    "Other malformed values: a name whose bytes are not UTF-8 is read with U+FFFD in their place (JSON "
    "traces, nsys SQLite); an integer column (a device, a launch id) whose value is not a finite int64 "
    "(ncu's `1e400`), or does not fit the column's narrower type (an XPlane step number or an ncu launch "
    "id past int32), is unknown (NULL), the rest of its row kept (a row whose required column it is, is "
    "left out with the rows that lack one); a number where text belongs (an nsys `StringIds` value a "
    "damaged database types as an integer) is read as its digits; a meta.json device key the commands "
    "read whose JSON type is wrong (a list for a `uuid`) is left out, as if the source had not said it, and "
    "so is a meta.json `start_ns` or `end_ns` outside `[0, 2**62)`; a "
    "GPU phase mark (`phase_gpu`) without both GPU times is left out with the rows that lack a required "
    "column; an execution-trace node whose `rf_id` is not a positive int64 (past int64, negative, a "
    "string) matches no op, and the profile's notes count such nodes; an ncu CSV header that repeats a "
    "column name is read by the first column of that name."
)


def malformed_time_sql(columns: set[str] | list[str]) -> list[str]:
    """SQL conditions over a table's ``columns``, any of which makes a row malformed (see
    :data:`TIME_RULE`); none overflows int64 whatever the values (a damaged file's included)."""
    names = set(columns)
    bad = [f'"{t}" NOT BETWEEN 0 AND {MAX_TIME_NS}' for t in ("start_ns", "end_ns", "ts_ns") if t in names]
    if {"start_ns", "end_ns"} <= names:
        bad.append('"end_ns" < "start_ns"')
        # least(): the sum stays within int64 even for a start out of range
        bad.append(f'"end_ns" > least("start_ns", {MAX_TIME_NS}) + {MAX_DURATION_NS}')
    return bad


def empty_table(name: str) -> pa.Table:
    """A zero-row table with the table's schema."""
    return TABLES_BY_NAME[name].schema.empty_table()


def conform(name: str, table: pa.Table) -> pa.Table:
    """Return ``table`` with exactly the schema of table ``name``: columns reordered, missing
    nullable columns added as nulls, types cast. Raises ValueError on a missing required column."""
    import pyarrow as pa

    spec = TABLES_BY_NAME[name]
    arrays = []
    for col in spec.columns:
        if col.name in table.column_names:
            arr = table.column(col.name)
            if arr.type != col.type:
                arr = arr.cast(col.type)
        elif col.nullable:
            arr = pa.nulls(table.num_rows, col.type)
        else:
            raise ValueError(f"table {name}: required column {col.name} is missing")
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=spec.schema)


def describe() -> str:
    """The schema as Markdown (used by ``dlscope schema`` and docs/format.md)."""
    lines = [f"# dlscope profile format, version {FORMAT_VERSION}", ""]
    for t in TABLES:
        lines += [f"## `{t.name}` ({t.layer})", "", t.doc, "", "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.dtype} | {c.doc} |" for c in t.columns]
        lines.append("")
    lines += ["## malformed rows", "", TIME_RULE, "", VALUE_RULE, ""]
    lines += ["## counter metrics", "", "| metric | unit | meaning |", "|---|---|---|"]
    lines += [f"| `{m}` | {u} | {d} |" for m, (u, d) in METRICS.items()]
    return "\n".join(lines) + "\n"
