"""Critical-path replay of the traced steps: how long a step would take with one cause removed.

A step is two timelines tied together: the host issues runtime calls one after another, with its
own work (Python, framework dispatch, data loading) in the gaps between them; the GPU runs what
each call launched, in launch order, as soon as it was launched and the previous work is done. A
call that blocks (a synchronize, a copy from pageable memory) holds the host until the GPU has
done everything before it. The step ends when both are done.

:func:`replay_calls` reads that model from the profile: one row per runtime call of the main
process's launching threads in each GPU window (see :mod:`.step_idle`), with the host work before
it split by what the host was doing (loading data, the optimizer step, the model's forward and
backward, anything else), whether it blocks, and the GPU time it launched split by kind (matrix
math by precision, layout conversions, host-to-device copies). :func:`replay` replays the windows
one after another, so GPU work left queued at the end of one step delays the next, as it does in
a real run. A :class:`Fix` changes the inputs (drops the data loading, unblocks the syncs, shortens
the matrix math, ...) and the replay gives the step time that follows, with every overlap that the
change opens or closes: a GPU-side fix saves nothing while the host is the bottleneck, and the
host's own work hidden behind a busy GPU costs nothing.

Tracing slows the host (the profiler's callbacks run on every op and call), never the GPU.
:func:`calibrate` finds the factor on host time that makes the replayed step as long as the steps
measured without tracing, and every replay uses it: the profiler's overhead is not read as the
program's. The replay itself is vectorized: a running maximum over the launches between two
blocking calls, one Python iteration per blocking call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from ...vocabulary.collectives import SMALL_BYTES, size_bytes_sql
from ...vocabulary.names import RuleId
from ..core import interval_arrays as ia
from ..core.class_times import ClassTimes
from ..core.context import ProfileData
from ..core.host_classes import MODEL_RE, OPTIMIZER_RE, Blocking, HostClass
from ..core.host_state import DATA_LOADING_RE, SYNC_API_RE, main_pid_sql
from ..core.kernel_names import kernel_names
from ..core.phase_islands import islands
from ..core.step_idle import windows_sql
from .occupancy import Device, profile_device, wave_factor_sql

# host work classes (in the order of HostClass's values): which phases the gap before a call falls in
HOST_CLASSES = tuple(c.label for c in HostClass)
LAYOUT_RE = r"nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw|nchw_to_nhwc|nhwc_to_nchw"
# A blocking call's own cost once it no longer waits: a runtime call returns in microseconds.
BLOCKING_CALL_OVERHEAD_NS = 5_000
# How many launched GPU work items may be pending before a launch call waits for room. Measured
# on an H100 (driver 580, CUDA 13; bench/hook_costs.py, bench/results/hook_costs_h100.json): behind
# one sleeping kernel, 1,021 tiny launches returned at once and the 1,022nd waited, in each of 3
# trials on 2 leases.
LAUNCH_QUEUE_DEPTH = 1022
# A launch call more than this many times the profile's median launch was held up (a full queue,
# a lock) rather than slow: unblocked launches vary little (on an H100, bench/hook_costs.py: 90th
# percentile 1.10-1.16x the median over 256 launches, 6 trials), so twice the median leaves them
# their natural spread.
LAUNCH_WAIT_FACTOR = 2.0
GPU_TABLES = ("kernels", "memcpy", "memset")
# A larger batch's factors modelled per kernel by its waves on the SMs (:mod:`.occupancy`); others
# scale GPU time linearly. memory_underused asks for at most 4x.
WAVE_FACTORS = (2, 3, 4)
WAVE_COLS = tuple(f"wave{k}" for k in WAVE_FACTORS)
ARRAYS = (
    "wid",
    "gap_input",
    "gap_optimizer",
    "gap_model",
    "gap_other",
    "call_ns",
    "cls",
    "blocking",
    "gpu_ns",
    "simt_ns",
    "tf32_ns",
    "layout_ns",
    "h2d_ns",
    "h2d_bytes",
    "small_comm_ns",
) + WAVE_COLS


@dataclass
class Calls:
    """The replay's input, one entry per runtime call (plus one sentinel per window end), in
    order; numpy arrays named as :data:`ARRAYS`. ``cls``: the :class:`HostClass` value of
    what the host was doing when it made the call; ``blocking``: its :class:`Blocking` value."""

    arrays: dict[str, np.ndarray]
    windows: int

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def copy(self) -> Calls:
        return Calls({k: v.copy() for k, v in self.arrays.items()}, self.windows)

    @property
    def empty(self) -> bool:
        return self.windows == 0 or len(self.arrays["wid"]) == 0


def _setup_of(gone: np.ndarray, launches: np.ndarray, wid: np.ndarray) -> np.ndarray:
    """The calls without GPU work whose next launch (in the same window) is in ``gone``."""
    n = len(gone)
    idx = np.where(launches, np.arange(n), n)
    next_launch = np.minimum.accumulate(idx[::-1])[::-1]  # index of the next launch at or after each call
    has = next_launch < n
    target = np.where(has, next_launch, 0)
    hidden: np.ndarray = ~launches & has & gone[target] & (wid[target] == wid)
    return hidden


def _gpu_items_sql(data: ProfileData, with_waves: bool = True) -> str | None:
    parts = []
    if data.has("kernels"):
        # classes judged once per distinct name (see kernel_names)
        small = "FALSE"
        comms = ""
        if data.has("comms"):  # a collective's kernel, when its message is small (latency-bound)
            size = size_bytes_sql("c.name", "c.in_bytes", "c.out_bytes", "coalesce(c.group_size, 1)")
            comms = f"""LEFT JOIN (SELECT c.rank, c.correlation_id, bool_or({size} < {SMALL_BYTES}) AS small
                                   FROM comms c WHERE c.correlation_id IS NOT NULL GROUP BY ALL) sc
                        ON sc.rank = k.rank AND sc.correlation_id = k.correlation_id"""
            small = "coalesce(sc.small, FALSE)"
        # without a larger batch to replay, each call's factors stay linear (never read): no occupancy arithmetic
        device = profile_device(data) if with_waves else None
        shape_join = ""
        if device:
            shape_join = f"LEFT JOIN {_wave_factors_table(data, device)} wf ON " + " AND ".join(
                f"wf.{c} IS NOT DISTINCT FROM k.{c}" for c in LAUNCH_SHAPE
            )
        waves = ", ".join(f"(k.end_ns - k.start_ns) * {f'wf.w{f}' if device else f} AS ns{f}" for f in WAVE_FACTORS)
        parts.append(f"""SELECT k.rank, k.correlation_id, k.end_ns - k.start_ns AS ns, n.precision AS prec,
                                n.layout, FALSE AS h2d, 0 AS bytes, FALSE AS pageable, FALSE AS d2h,
                                {small} AS small_comm, {waves}
                         FROM kernels k JOIN (SELECT name_id, precision,
                                                     regexp_matches(lower(name), '{LAYOUT_RE}') AS layout
                                              FROM {kernel_names(data)}) n ON n.name_id = k.name_id {comms}
                         {shape_join}""")
    linear = ", ".join(f"(end_ns - start_ns) * {f} AS ns{f}" for f in WAVE_FACTORS)
    if data.has("memcpy"):
        parts.append(f"""SELECT rank, correlation_id, end_ns - start_ns AS ns, NULL AS prec, FALSE AS layout,
                               copy_kind = 'HtoD' AS h2d, bytes,
                               'pageable' IN (coalesce(src_kind, ''), coalesce(dst_kind, '')) AS pageable,
                               copy_kind = 'DtoH' AS d2h, FALSE AS small_comm, {linear}
                        FROM memcpy""")
    if data.has("memset"):
        # every part names its columns: the union takes the first part's names, and the kernels'
        # part may be missing (a profile without kernels)
        parts.append(
            f"""SELECT rank, correlation_id, end_ns - start_ns AS ns, NULL AS prec, FALSE AS layout, FALSE AS h2d,
                               0 AS bytes, FALSE AS pageable, FALSE AS d2h, FALSE AS small_comm, {linear} FROM memset"""
        )
    return " UNION ALL ".join(parts) if parts else None


# What a kernel's waves depend on: its launch shape and resources.
LAUNCH_SHAPE = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers", "shared_bytes")


def _wave_factors_table(data: ProfileData, device: Device) -> str:
    """A temp table of the wave factors (``w2``, ``w3``, ...) per distinct launch shape: a profile
    launches a few hundred shapes, so the occupancy arithmetic runs on those, not on every kernel
    (a third of the replay's input query on a 500k-event profile)."""
    cols = ", ".join(LAUNCH_SHAPE)
    factors = ", ".join(f"{wave_factor_sql(device, f)} AS w{f}" for f in WAVE_FACTORS)
    return data.shared_table(
        "kernel_wave_factors", lambda: f"SELECT {cols}, {factors} FROM (SELECT DISTINCT {cols} FROM kernels) k"
    )


def replay_calls(data: ProfileData, waves: bool = True) -> Calls:
    """The replay's input for the profile's GPU windows (empty without runtime calls or GPU work).
    ``waves``: model each call's GPU time under a larger batch by its kernels' waves on the SMs (what a
    :class:`Fix` with ``batch`` > 1 replays); without it the factors are linear."""
    gpu = _gpu_items_sql(data, waves)
    if gpu is None or not data.has("api"):
        return Calls({k: np.zeros(0) for k in ARRAYS}, 0)
    wave_sums = ", ".join(f"sum(ns{f}) AS ns{f}" for f in WAVE_FACTORS)
    wave_raw = ", ".join(f"a.ns{f}" for f in WAVE_FACTORS)
    wave_out = ", ".join(f"coalesce(ns{f}, 0) AS ns{f}" for f in WAVE_FACTORS)
    wave_null = ", NULL" * len(WAVE_FACTORS)
    cols = data.con.execute(f"""
        WITH mp AS ({main_pid_sql(data)}),
             win AS MATERIALIZED (SELECT row_number() OVER (ORDER BY rank, start_ns) AS wid, rank, start_ns, end_ns
                                  FROM ({windows_sql(data)}) WHERE end_ns > start_ns),
             g AS MATERIALIZED (
                SELECT rank, correlation_id, sum(ns) AS gpu_ns,
                       coalesce(sum(ns) FILTER (WHERE prec = 'fp32'), 0) AS simt_ns,
                       coalesce(sum(ns) FILTER (WHERE prec IN ('fp32_tc', 'tc_unknown')), 0) AS tf32_ns,
                       coalesce(sum(ns) FILTER (WHERE layout), 0) AS layout_ns,
                       coalesce(sum(ns) FILTER (WHERE h2d), 0) AS h2d_ns,
                       coalesce(sum(bytes) FILTER (WHERE h2d), 0) AS h2d_bytes,
                       coalesce(sum(ns) FILTER (WHERE small_comm), 0) AS small_comm_ns, {wave_sums},
                       bool_or(pageable AND NOT d2h) AS pageable, bool_or(pageable AND d2h) AS pageable_d2h
                FROM ({gpu}) WHERE correlation_id IS NOT NULL GROUP BY ALL),
             a AS MATERIALIZED (
                SELECT a.rank, a.pid, a.tid, a.start_ns, a.end_ns, a.name, g.* EXCLUDE (rank, correlation_id)
                FROM api a LEFT JOIN mp m USING (rank)
                LEFT JOIN g ON g.rank = a.rank AND g.correlation_id = a.correlation_id
                WHERE m.pid IS NULL OR a.pid IS NULL OR a.pid = m.pid),
             launchers AS (SELECT DISTINCT rank, tid FROM a WHERE gpu_ns IS NOT NULL),
             raw AS (
                SELECT w.wid, w.rank, w.start_ns AS w_start, a.start_ns, a.end_ns, a.name, a.gpu_ns, a.simt_ns,
                       a.tf32_ns, a.layout_ns, a.h2d_ns, a.h2d_bytes, a.pageable, a.pageable_d2h, a.small_comm_ns,
                       {wave_raw}
                FROM a SEMI JOIN launchers l ON l.rank = a.rank AND l.tid IS NOT DISTINCT FROM a.tid
                JOIN win w ON w.rank = a.rank AND a.start_ns >= w.start_ns AND a.start_ns < w.end_ns
                UNION ALL
                SELECT wid, rank, start_ns, end_ns, end_ns, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
                       {wave_null}
                FROM win)
        SELECT wid, rank, start_ns, w_start, end_ns,
               CASE WHEN name IS NULL THEN {Blocking.NONE:d}
                    WHEN regexp_matches(lower(name), '{SYNC_API_RE}') THEN {Blocking.SYNC:d}
                    WHEN coalesce(pageable, FALSE) THEN {Blocking.PAGEABLE_H2D:d}
                    WHEN coalesce(pageable_d2h, FALSE) THEN {Blocking.PAGEABLE_D2H:d}
                    ELSE {Blocking.NONE:d} END AS blocking,
               greatest(end_ns - start_ns, 0) AS call_ns,
               coalesce(gpu_ns, 0) AS gpu_ns, coalesce(simt_ns, 0) AS simt_ns, coalesce(tf32_ns, 0) AS tf32_ns,
               coalesce(layout_ns, 0) AS layout_ns, coalesce(h2d_ns, 0) AS h2d_ns,
               coalesce(h2d_bytes, 0) AS h2d_bytes, coalesce(small_comm_ns, 0) AS small_comm_ns, {wave_out}
        FROM raw ORDER BY wid, start_ns, name NULLS LAST""").fetchnumpy()
    if not len(cols["wid"]):
        return Calls({k: np.zeros(0) for k in ARRAYS}, 0)
    _gaps(cols)
    gpu_ns = np.asarray(cols["gpu_ns"], dtype=np.float64)
    for f in WAVE_FACTORS:  # each call's GPU time with f times the work, as a factor on its GPU time
        cols[f"wave{f}"] = np.divide(
            np.asarray(cols[f"ns{f}"], dtype=np.float64), gpu_ns, out=np.full(len(gpu_ns), float(f)), where=gpu_ns > 0
        )
    _split_gaps(data, cols)
    arrays = {k: np.asarray(cols[k]).astype(np.float64) for k in ARRAYS}
    blocking = arrays["blocking"] > 0
    arrays["call_ns"] = np.where(blocking, np.minimum(arrays["call_ns"], BLOCKING_CALL_OVERHEAD_NS), arrays["call_ns"])
    arrays["call_ns"] = _launch_costs(arrays["call_ns"], arrays["gpu_ns"] > 0, blocking)
    arrays["cls"] = arrays["cls"].astype(np.int64)
    arrays["blocking"] = arrays["blocking"].astype(np.int64)
    return Calls(arrays, int(len(np.unique(arrays["wid"]))))


def _gaps(cols: dict[str, np.ndarray]) -> None:
    """Add ``gap_ns`` and ``gap_start`` to the calls (in order within each window): the host's time
    before each call since the window's start or the end of the latest call before it, whichever is
    later. In numpy, a running maximum per window: as SQL window functions (a row number and a
    running maximum ordered by time and name) they were 60 ms of the replay's 100 ms query on the
    504k-event GPT profile, sorting the calls twice."""
    wid = np.asarray(cols["wid"])
    start = np.asarray(cols["start_ns"], dtype=np.int64)
    end = np.asarray(cols["end_ns"], dtype=np.int64)
    base = np.asarray(cols["w_start"], dtype=np.int64).copy()  # the window's start, or a later call's end
    first = np.flatnonzero(np.r_[True, wid[1:] != wid[:-1]])
    for lo, hi in zip(first.tolist(), np.append(first[1:], len(wid)).tolist()):
        if hi - lo > 1:  # the latest end among the calls before each one in its window
            base[lo + 1 : hi] = np.maximum(base[lo + 1 : hi], np.maximum.accumulate(end[lo : hi - 1]))
    cols["gap_ns"] = np.maximum(start - base, 0)
    cols["gap_start"] = np.minimum(start, base)


def _launch_costs(call_ns: np.ndarray, launches: np.ndarray, blocking: np.ndarray) -> np.ndarray:
    """Launch calls' own host cost: a launch that took much longer than the profile's typical
    launch (over :data:`LAUNCH_WAIT_FACTOR` times the median) was waiting for room in the GPU's
    queue, not working: it keeps the typical cost, and the replay's queue model
    (:data:`LAUNCH_QUEUE_DEPTH`) makes it wait again where the GPU is that far behind."""
    mine = launches & ~blocking
    if not mine.any():
        return call_ns
    cap = LAUNCH_WAIT_FACTOR * float(np.median(call_ns[mine]))
    return np.where(mine, np.minimum(call_ns, cap), call_ns)


def _split_gaps(data: ProfileData, cols: dict[str, np.ndarray]) -> None:
    """Add ``gap_input``, ``gap_optimizer``, ``gap_model``, ``gap_other`` (the host work before
    each call, by the phases it lies in, in precedence order) and ``cls`` (what the host was in
    when it made the call) to ``cols``. In numpy: a searchsorted per class instead of two ASOF
    joins per class and figure (a third of the report's time on a 500k-event profile)."""
    rank = np.asarray(cols["rank"])
    gap_start = np.asarray(cols["gap_start"], dtype=np.int64)
    gap_end = gap_start + np.asarray(cols["gap_ns"], dtype=np.int64)
    at = np.asarray(cols["start_ns"], dtype=np.int64)
    cov, inside = {}, {}
    for name, regex in (("input", DATA_LOADING_RE), ("optimizer", OPTIMIZER_RE), ("model", MODEL_RE)):
        isl = islands(data, (regex,))
        cov[name] = ia.covered(rank, gap_start, gap_end, isl)
        inside[name] = ia.covered(rank, at, at + 1, isl) > 0
    gap = np.asarray(cols["gap_ns"], dtype=np.int64)
    # nested phases: the inner class wins (input, then model, then optimizer: Lightning runs
    # forward and backward inside optimizer.step(closure), see host_classes)
    cols["gap_input"] = cov["input"]
    cols["gap_model"] = np.maximum(np.minimum(cov["model"], gap - cov["input"]), 0)
    cols["gap_optimizer"] = np.maximum(np.minimum(cov["optimizer"], gap - cov["input"] - cols["gap_model"]), 0)
    cols["cls"] = np.select(
        [inside["input"], inside["model"], inside["optimizer"]],
        [HostClass.INPUT, HostClass.MODEL, HostClass.OPTIMIZER],
        HostClass.OTHER,
    )
    cols["gap_other"] = np.maximum(gap - cols["gap_input"] - cols["gap_optimizer"] - cols["gap_model"], 0)


@dataclass(frozen=True)
class Fix:
    """A change to the step, as factors on the replay's inputs (1 = unchanged).

    ``host``: per :class:`HostClass`, a factor on the host's own work in that class (gaps and the
    calls made in it); ``unblock``: the :class:`Blocking` kinds that no longer block;
    ``gpu``: per GPU-time column (``simt_ns``, ``tf32_ns``, ``layout_ns``, ``h2d_ns``), the factor
    on that part of each call's GPU time; ``gpu_in``: per host class, a factor on all GPU time
    launched from it; ``batch``: the work per step grows this many times (data loading scales with
    it, and the GPU time outside the optimizer: each kernel by its waves on the SMs where the
    factor is one of :data:`WAVE_FACTORS`, linearly otherwise) and the result is per sample;
    ``fuse_launches_in``: the host classes whose launches become one (see :func:`_fuse_launches`)."""

    name: RuleId  # the advice rule whose change this is (its finding links to it by this id)
    describe: str = ""  # the change in words, for the evidence
    host: dict[HostClass, float] = field(default_factory=dict)
    unblock: tuple[Blocking, ...] = ()
    gpu: dict[str, float] = field(default_factory=dict)
    gpu_in: dict[HostClass, float] = field(default_factory=dict)
    batch: float = 1.0
    drop_calls_of: tuple[str, ...] = ()  # calls whose GPU work is all in these columns go, host work too
    # with drop_calls_of: the calls without GPU work just before a dropped one go too (an
    # operation's setup: NCCL records and waits for events before it launches its kernel)
    drop_setup: bool = False
    # The launches made in these classes become one per run (see _fuse_launches): a fix that fuses
    # many kernels into a few must also remove their launches, not only make them cheaper.
    fuse_launches_in: tuple[HostClass, ...] = ()

    def apply(self, calls: Calls) -> Calls:
        c = calls.copy()
        a = c.arrays
        for col in self.drop_calls_of:
            gone = (a["gpu_ns"] > 0) & (a[col] >= a["gpu_ns"])
            if self.drop_setup and len(gone):
                gone = gone | _setup_of(gone, a["gpu_ns"] > 0, a["wid"])
            for k in ("gap_input", "gap_optimizer", "gap_model", "gap_other", "call_ns"):
                a[k] = np.where(gone, 0.0, a[k])
        for cls, f in self.host.items():
            a[f"gap_{cls.label}"] *= f
            a["call_ns"] = np.where(a["cls"] == int(cls), a["call_ns"] * f, a["call_ns"])
        for kind in self.unblock:
            a["blocking"] = np.where(a["blocking"] == int(kind), int(Blocking.NONE), a["blocking"])
        for col, f in self.gpu.items():
            cut = a[col] * (1 - f)
            a["gpu_ns"] = np.maximum(a["gpu_ns"] - cut, 0)
            a[col] = a[col] * f
        for cls, f in self.gpu_in.items():
            a["gpu_ns"] = np.where(a["cls"] == int(cls), a["gpu_ns"] * f, a["gpu_ns"])
        for cls in self.fuse_launches_in:
            _fuse_launches(a, cls)
        if self.batch != 1.0:
            # the optimizer's kernels work per parameter, not per sample: they stay as they are
            # (measured on H100, a 2x batch took 1.85x and 1.86x the GPU time per step on the suite's
            # ResNet-50 and GPT, whose per-parameter optimizers launch a fixed set of kernels)
            scales = a["cls"] != HOST_CLASSES.index("optimizer")
            b = self.batch
            factor = a[f"wave{int(b)}"] if b == int(b) and int(b) in WAVE_FACTORS else b
            a["gpu_ns"] = np.where(scales, a["gpu_ns"] * factor, a["gpu_ns"])
            a["gap_input"] *= self.batch
        return c


# The per-call GPU columns that add up when launches are fused (the wave columns are factors:
# the fused launch gets their mean weighted by GPU time).
GPU_SUM_COLS = ("gpu_ns", "simt_ns", "tf32_ns", "layout_ns", "h2d_ns", "h2d_bytes", "small_comm_ns")


def _fuse_launches(a: dict[str, np.ndarray], cls: HostClass) -> None:
    """In place: the launches made in ``cls`` become one per run, a run being such launches in
    one window between two blocking calls; the run's GPU work moves to its last launch (a fused
    kernel starts once the host has gathered all its inputs), and the other calls keep their
    host work but launch nothing.

    Why the count matters and not only the host's cost per launch: the replay's queue holds
    :data:`LAUNCH_QUEUE_DEPTH` pending launches. Behind a backlog (a per-parameter optimizer's
    1,232 kernels per step queued behind a long backward pass on a BERT-like program on an H200),
    a host that still launched every kernel, only faster, would wait at the queue until the GPU
    was nearly done, as the unfused host does, and could not go on to the next step's work (its
    data loading) while the GPU finishes: a fused optimizer's saving there (measured 27.6% by
    ``dlscope try``) replayed as 3.2%, because the few launches it really makes never fill the queue."""
    launched = np.flatnonzero((a["gpu_ns"] > 0) & (a["cls"] == int(cls)))
    if len(launched) < 2:
        return
    # a run's key: window, then the blocking calls so far (both non-decreasing in the calls' order)
    runs = np.cumsum(a["blocking"] > 0)
    key = a["wid"].astype(np.int64) * (int(runs[-1]) + 1) + runs
    k = key[launched]
    first = np.r_[True, k[1:] != k[:-1]]
    group = np.cumsum(first) - 1
    last = launched[np.r_[first[1:], True]]
    gpu = a["gpu_ns"][launched]
    total = np.bincount(group, weights=gpu)
    for col in WAVE_COLS:
        weighted = np.bincount(group, weights=a[col][launched] * gpu)
        a[col][last] = np.divide(weighted, total, out=np.ones(len(total)), where=total > 0)
    for col in GPU_SUM_COLS:
        sums = np.bincount(group, weights=a[col][launched])
        a[col][launched] = 0.0
        a[col][last] = sums


HostScale = float | np.ndarray  # one factor on all host work, or one per HostClass (by value)


def _class_factors(host_factor: HostScale) -> np.ndarray:
    f = np.asarray(host_factor, dtype=np.float64)
    return np.full(len(HostClass), float(f)) if f.ndim == 0 else f


def host_work(calls: Calls, host_factor: HostScale = 1.0) -> np.ndarray:
    """Each entry's own host work (the gap before the call and the call itself), in ns, with the
    host's work of each class scaled by its factor."""
    a = calls.arrays
    f = _class_factors(host_factor)
    gaps = sum(a[f"gap_{c.label}"] * f[c] for c in HostClass)
    work: np.ndarray = gaps + a["call_ns"] * f[a["cls"].astype(np.int64)]
    return work


@dataclass(frozen=True)
class Replayed:
    """A replay's outcome: the time of all windows one after another, and how long the host
    waited for the GPU at the blocking calls of each class (ns, over all windows); with ``lags``,
    how far the GPU was behind the host as each class's last call of a window returned (ns, the
    mean over the windows holding the class; NaN for a class none holds): what the GPU marks of
    the untraced steps measure at each phase's end (:attr:`~..core.class_times.ClassTimes.lag_ms`)."""

    total_ns: float
    wait_ns: np.ndarray  # by HostClass value
    lag_ns: np.ndarray | None = None  # by HostClass value


def _class_end_lags(returned: np.ndarray, gpu_done: np.ndarray, wid: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Per class, the mean over windows of the GPU's lag (its work launched so far still to finish)
    at the class's last call in the window: ``gpu_done - returned`` there."""
    out = np.full(len(HostClass), np.nan)
    if not len(returned):
        return out
    key = wid.astype(np.int64) * len(HostClass) + cls
    # the last call of each (window, class): the first in the reversed order
    _, first_rev = np.unique(key[::-1], return_index=True)
    last = len(key) - 1 - first_rev
    lag = gpu_done[last] - returned[last]
    for c in HostClass:
        mine = cls[last] == int(c)
        if mine.any():
            out[int(c)] = float(lag[mine].mean())
    return out


def replay_detail(
    calls: Calls, host_factor: HostScale = 1.0, queue_depth: int | None = None, lags: bool = False
) -> Replayed:
    """Replay the windows one after another (see the module's docstring); ``lags``: with
    :attr:`Replayed.lag_ns`.

    A launch returns only once the GPU has room in its queue of pending work: with more than
    ``queue_depth`` items (default :data:`LAUNCH_QUEUE_DEPTH`) launched and not yet finished, the
    launch call waits for the oldest to finish. A host that launches far ahead of a busy GPU (a
    per-parameter optimizer behind a long backward pass) waits there, not in its own work."""
    depth = LAUNCH_QUEUE_DEPTH if queue_depth is None else queue_depth
    waits = np.zeros(len(HostClass))
    if calls.empty:
        return Replayed(0.0, waits)
    a = calls.arrays
    work = host_work(calls, host_factor)
    gpu, blocking, cls = a["gpu_ns"], a["blocking"], a["cls"].astype(np.int64)
    n = len(work)
    host_t, gpu_end = 0.0, 0.0
    cuts = np.flatnonzero(blocking > 0)
    start = 0
    launch_at, ends = [], []  # per launched item: when its call returned, when it finished
    returned = np.zeros(n) if lags else None  # per call: when it returned, and the GPU's work so far done
    gpu_done = np.zeros(n) if lags else None
    for stop in [*cuts.tolist(), n]:
        # launches start..stop-1 do not block; call `stop` (if < n) blocks after its own work
        seg_end = stop + 1 if stop < n else n
        h = host_t + np.cumsum(work[start:seg_end])  # each call's return time
        g = gpu[start:seg_end]
        launched = g > 0
        before = gpu_end
        if launched.any():
            r, d = h[launched], g[launched]
            c = np.cumsum(d)
            prev = np.concatenate(([0.0], c[:-1]))
            e = c + np.maximum(gpu_end, np.maximum.accumulate(r - prev))
            gpu_end = float(e[-1])
            launch_at.append(r)
            ends.append(e)
        if returned is not None and gpu_done is not None:
            returned[start:seg_end] = h
            done = np.full(len(h), before)
            if launched.any():
                done[launched] = e
            gpu_done[start:seg_end] = np.maximum.accumulate(done)
        host_t = float(h[-1]) if len(h) else host_t
        # a blocking call waits until the GPU is done with everything launched so far (its own copy too)
        if stop < n and gpu_end > host_t:
            waits[cls[stop]] += gpu_end - host_t
            host_t = gpu_end
            if returned is not None:
                returned[stop] = host_t
        start = seg_end
    if depth and ends:
        r, e = np.concatenate(launch_at), np.concatenate(ends)
        if len(r) > depth and bool((r[depth:] < e[:-depth]).any()):
            return _replay_with_queue(work, gpu, blocking, cls, depth, a["wid"] if lags else None)
    lag = _class_end_lags(returned, gpu_done, a["wid"], cls) if returned is not None and gpu_done is not None else None
    return Replayed(max(host_t, gpu_end), waits, lag)


def _replay_with_queue(
    work: np.ndarray,
    gpu: np.ndarray,
    blocking: np.ndarray,
    cls: np.ndarray,
    depth: int,
    wid: np.ndarray | None = None,
) -> Replayed:
    """The replay for windows whose launches outrun the GPU's queue (the vectorized replay assumes
    an unbounded queue, and found that it overflowed).

    Still vectorized, in segments: each ends at a blocking call or holds at most ``depth`` launches,
    so that the finish time a launch may wait for (that of the launch ``depth`` before it) lies in
    an earlier segment and is known. In a segment, a call returns at ``t[i] = max(t[i-1] + work[i],
    floor[i])``, a running maximum over the cumulative work; its wait for room is what the maximum
    adds. (A call-by-call loop gave the same times at 20x the cost: 25 ms per replay of 500k events.)
    ``wid`` (each call's window): the lags at each class's last call too (:class:`Replayed`)."""
    n = len(work)
    waits = np.zeros(len(HostClass))
    returned = np.zeros(n) if wid is not None else None
    gpu_done = np.zeros(n) if wid is not None else None
    launched = gpu > 0
    launch_no = np.cumsum(launched) - 1  # each launch's number among the launches
    ends = np.zeros(int(launched.sum()))  # when each launched item finishes
    starts_block = launched & (launch_no % depth == 0)
    bounds = np.unique(np.concatenate(([0, n], np.flatnonzero(blocking > 0) + 1, np.flatnonzero(starts_block))))
    host_t = gpu_end = 0.0
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        seg_launched = launched[s:e]
        nos = launch_no[s:e][seg_launched]
        floor = np.full(e - s, -np.inf)
        waited = nos >= depth
        floor[np.flatnonzero(seg_launched)[waited]] = ends[nos[waited] - depth]
        cum = np.cumsum(work[s:e])
        lift = np.maximum(host_t, np.maximum.accumulate(floor - cum))
        t = cum + lift
        waits += np.bincount(cls[s:e], weights=np.diff(lift, prepend=host_t), minlength=len(HostClass))
        before = gpu_end
        if len(nos):
            r, d = t[seg_launched], gpu[s:e][seg_launched]
            c = np.cumsum(d)
            prev = np.concatenate(([0.0], c[:-1]))
            fin = c + np.maximum(gpu_end, np.maximum.accumulate(r - prev))
            ends[nos] = fin
            gpu_end = float(fin[-1])
        if returned is not None and gpu_done is not None:
            returned[s:e] = t
            done = np.full(e - s, before)
            if len(nos):
                done[seg_launched] = ends[nos]
            gpu_done[s:e] = np.maximum.accumulate(done)
        host_t = float(t[-1])
        # a blocking call (always a segment's last) waits until the GPU is done with everything launched so far
        if blocking[e - 1] and gpu_end > host_t:
            waits[cls[e - 1]] += gpu_end - host_t
            host_t = gpu_end
            if returned is not None:
                returned[e - 1] = host_t
    lag = None
    if wid is not None and returned is not None and gpu_done is not None:
        lag = _class_end_lags(returned, gpu_done, wid, cls)
    return Replayed(max(host_t, gpu_end), waits, lag)


def replay(calls: Calls, host_factor: HostScale = 1.0) -> float:
    """Replayed time of all windows one after another, in ns (0 when there is nothing to
    replay). ``host_factor`` scales the host's own work (see :func:`calibrate`)."""
    return replay_detail(calls, host_factor).total_ns


def step_ms(calls: Calls, host_factor: HostScale = 1.0, per_sample_of: float = 1.0) -> float:
    """Mean replayed step in ms (per ``per_sample_of`` steps' worth of samples, for a larger batch)."""
    return replay(calls, host_factor) / 1e6 / max(calls.windows, 1) / per_sample_of


class CalibrationBasis(enum.Enum):
    """What the replay's host work was scaled to."""

    PER_CLASS = "per class, from the phases of the steps measured without tracing"
    STEP_TIME = "one factor, from the step time measured without tracing"
    NONE = "not calibrated: every step was traced"


@dataclass(frozen=True)
class Calibration:
    """The factors on host work that make the replay match the untraced steps."""

    factors: np.ndarray  # by HostClass value
    traced_ms: float  # replayed step at factor 1 (the traced steps as recorded)
    target_ms: float | None  # the untraced mean step, when there are untraced steps
    basis: CalibrationBasis = CalibrationBasis.STEP_TIME
    calibrated_ms: float | None = None  # replayed step with the factors

    @property
    def matched(self) -> bool:
        """Whether the calibrated replay stands for the untraced steps: within
        :data:`MATCH_TOLERANCE` of their mean (or there is nothing to match: every step traced).
        It cannot when the traced steps did other work than the rest (torch.compile compiling,
        CUDA graphs being captured) or the host's factors hit their bounds."""
        if self.target_ms is None or self.calibrated_ms is None:
            return True
        return abs(self.calibrated_ms - self.target_ms) <= MATCH_TOLERANCE * self.target_ms

    @property
    def host_factor(self) -> float:
        """One number for the factors (their mean weighted by the traced host work is not kept:
        the smallest and largest are what a reader needs; this is the plain mean)."""
        return float(np.mean(self.factors))

    @property
    def by_class(self) -> dict[str, float]:
        return {c.label: float(self.factors[c]) for c in HostClass}

    @property
    def note(self) -> str:
        if self.target_ms is None or np.all(np.abs(self.factors - 1.0) < 0.02):
            return ""
        if self.basis is CalibrationBasis.PER_CLASS:
            parts = ", ".join(f"{c.label} {self.factors[c]:.2f}" for c in HostClass if abs(self.factors[c] - 1) >= 0.02)
            return (
                f"host work per class scaled to the steps measured without tracing ({parts}; replayed step "
                f"{self.traced_ms:.1f} ms traced, {self.calibrated_ms or 0:.1f} ms calibrated, "
                f"{self.target_ms:.1f} ms measured)"
            )
        return (
            f"host work scaled by {self.host_factor:.2f} so the replayed step ({self.traced_ms:.1f} ms traced) "
            f"matches the {self.target_ms:.1f} ms measured without tracing"
        )


# The tracer only slows the host: a factor is at most 1. A class whose untraced time is nearly all
# waiting keeps at least this much of its traced work (the replay then waits for the rest).
MIN_FACTOR = 0.05
# How far the calibrated replay may stay from the untraced mean step and still stand for it:
# dlscope's own line, a quarter of the step (the suite's calibrated replays land within 5%; the
# ones that miss by more replay traced steps unlike the rest, e.g. 28 ms replayed against 4 ms
# measured when torch.compile compiled during the traced window).
MATCH_TOLERANCE = 0.25
CALIBRATION_ROUNDS = 12


def calibrate(calls: Calls, target_ms: float | None) -> Calibration:
    """One factor: bisect the host factor in [0.05, 1] (tracing only slows the host) so that the
    replayed step equals ``target_ms``; 1 without a target or when the replay is already no longer."""
    traced = step_ms(calls)
    ones = np.ones(len(HostClass))
    if not target_ms or calls.empty or traced <= target_ms:
        basis = CalibrationBasis.STEP_TIME if target_ms else CalibrationBasis.NONE
        return Calibration(ones, traced, target_ms, basis, traced)
    lo, hi = MIN_FACTOR, 1.0
    if step_ms(calls, lo) >= target_ms:
        return Calibration(ones * lo, traced, target_ms, calibrated_ms=step_ms(calls, lo))
    for _ in range(30):
        mid = (lo + hi) / 2
        if step_ms(calls, mid) > target_ms:
            hi = mid
        else:
            lo = mid
    f = (lo + hi) / 2
    return Calibration(ones * f, traced, target_ms, calibrated_ms=step_ms(calls, f))


def traced_work_ms(calls: Calls) -> np.ndarray:
    """The traced host work per window of each class, in ms (gaps and calls, unscaled)."""
    a = calls.arrays
    cls = a["cls"].astype(np.int64)
    out = np.array([a[f"gap_{c.label}"].sum() + a["call_ns"][cls == c].sum() for c in HostClass])
    return out / 1e6 / max(calls.windows, 1)


def calibrate_by_class(
    calls: Calls, untraced_ms: dict[HostClass, float], target_ms: float, marks: ClassTimes | None = None
) -> Calibration:
    """Per-class factors so that each class's replayed host time (its own work plus the replay's
    waits at its blocking calls) equals the untraced steps' time in that class.

    A fixed point: the waits depend on the factors (less host work, more waiting), so the factors
    are found again from the waits of the last round until they settle. The untraced time of a
    class holds its waits too (a ``.item()`` in the loop waits for the GPU): only the rest is work.

    ``marks`` (the untraced steps' class times with the GPU marks at their phases' ends): where a
    class waits for the GPU, its time alone cannot tell its work from its waits (:func:`_by_lag`)."""
    traced = step_ms(calls)
    work = traced_work_ms(calls)
    want = np.array([max(untraced_ms.get(c, 0.0), 0.0) for c in HostClass])
    f = np.ones(len(HostClass))
    for _ in range(CALIBRATION_ROUNDS):
        waits = replay_detail(calls, f).wait_ns / 1e6 / max(calls.windows, 1)
        new = np.where(work > 0, np.clip((want - waits) / np.where(work > 0, work, 1.0), MIN_FACTOR, 1.0), 1.0)
        if np.allclose(new, f, atol=1e-3):
            f = new
            break
        f = new
    if marks is not None and marks.lag_ms:
        f = _by_lag(calls, f, work, want, marks)
    return Calibration(f, traced, target_ms, CalibrationBasis.PER_CLASS, step_ms(calls, f))


# Factors tried per class between MIN_FACTOR and the fixed point's (:func:`_by_lag`).
LAG_CANDIDATES = 12
# A class's time is flat in its work (:func:`_by_lag`) when over those factors it changes by at most
# this share of its work's change: its waits absorb the rest. The share is 1 where the time is all
# work and 0 where waits hide the work whole; half is the midpoint, not a value fitted to a profile
# (the BERT-like program's: optimizer 0.22, model, forward and backward together, 0.63).
FLAT_SHARE = 0.5
# The least standard errors the match of :func:`_by_lag` divides by (ms): a class time or a lag that
# does not vary from step to step still has the GPU marks' and the phases' own resolution.
MIN_TIME_SE_MS = 0.1
MIN_LAG_SE_MS = 0.05


def _by_lag(calls: Calls, f: np.ndarray, work: np.ndarray, want: np.ndarray, marks: ClassTimes) -> np.ndarray:
    """The factors with those of the classes that wait for the GPU chosen again by the GPU's lag.

    Behind a GPU that is far behind (a per-parameter optimizer's launches queued behind a long
    backward pass), a host whose own work is smaller only waits longer at the full launch queue:
    its class takes about as long either way. The fixed point then settles on the largest work that
    fits; the BERT-like program's untraced optimizer phase (24.8 ms) replayed as 20.6 ms of work and
    4.2 of waiting, where its runs with TF32 (the backward's kernels 7x shorter, nothing to wait
    for) took 14.4 ms (bench/RESULTS.md, 2026-11-28). What tells them apart is how far the GPU is
    behind as the class ends: more work left queued behind a host that only waited. So for each
    class with a measured lag whose time is flat in its work (:data:`FLAT_SHARE`), the factor between
    :data:`MIN_FACTOR` and the fixed point's that matches both its time and its lag best, each in its
    standard errors over the steps (on that profile: 0.27 instead of 0.64, 8.5 ms of work)."""
    windows = max(calls.windows, 1)
    out: np.ndarray = np.array(f, dtype=np.float64)
    for c in HostClass:
        if c not in marks.lag_ms or work[c] <= 0 or out[c] <= MIN_FACTOR:
            continue
        time_se = max(marks.se_ms.get(c, 0.0), MIN_TIME_SE_MS)
        lag_se = max(marks.lag_se_ms.get(c, 0.0), MIN_LAG_SE_MS)

        def at(fc: float, c: HostClass = c) -> tuple[float, float, float]:
            """(factor, the class's replayed time, its lag), in ms, with the class's factor at ``fc``."""
            trial = out.copy()
            trial[c] = fc
            r = replay_detail(calls, trial, lags=True)
            assert r.lag_ns is not None
            return fc, fc * work[c] + r.wait_ns[c] / 1e6 / windows, r.lag_ns[c] / 1e6

        grid = np.linspace(MIN_FACTOR, out[c], LAG_CANDIDATES).tolist()
        low, high = at(grid[0]), at(grid[-1])
        # where the class's time follows its work, the time tells the factor: a lag that misses then
        # says the GPU's side differs (its kernels longer untraced), which no host factor should mend
        if high[1] - low[1] > FLAT_SHARE * work[c] * (high[0] - low[0]):
            continue
        tried = [low, *(at(fc) for fc in grid[1:-1]), high]
        miss = [((t - want[c]) / time_se) ** 2 + ((lag - marks.lag_ms[c]) / lag_se) ** 2 for _, t, lag in tried]
        out[c] = tried[int(np.argmin(miss))][0]
    return out
