"""Finalize: turn a spool (one or several recording processes) into a profile.

Runs at the end of ``with dlscope.profile(...)``, in the ``dlscope profile`` parent after the
program exits, and from ``dlscope summary`` on a spool left by a killed run. Each process's
application events are paired into phases (vectorized: enters and exits of one (thread, name)
pair up by nesting level), step boundaries become steps, each collector decodes its own files,
and the builder writes the tables.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..store import spool
from ..store.build import ProfileBuilder
from ..store.meta import CollectorStatus, Meta, RankEnd, RunEnd
from ..store.writer import remove_spool
from ..vocabulary.version import __version__
from . import COLLECTORS
from .base import DecodeContext
from .batch_size import GIVEN
from .child_exits import exit_status, read_exit
from .forward_passes import merge_forward_calls
from .schedule import Action, StepSchedule
from .torch_hooks import HOOK_PREFIX, HOOK_SOURCE, TorchPhaseHooks

PROCESS_DOMAIN = "process"  # domain of the phase covering a whole profiled command


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pair_phase_events(
    nid: np.ndarray, tid: np.ndarray, val: np.ndarray, open_end: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pair signed enter(+t)/exit(-t) events into ranges.

    Events of one (tid, nid) pair are in recording order. Within a pair, an enter at nesting
    level L is closed by the next exit at level L; sorting by (pair, level, order) puts each enter
    right before its exit. Exits with no enter are dropped; enters never closed end at
    ``open_end`` and are reported as unclosed. Returns (nid, tid, start, end, unclosed).
    """
    n = len(val)
    if n == 0:
        e = np.empty(0, np.int64)
        return e, e, e, e, np.empty(0, bool)
    order = np.lexsort((np.arange(n), nid, tid))  # by tid, nid, then recording order
    nid, tid, val = nid[order], tid[order], val[order]
    enter = val > 0
    step = np.where(enter, 1, -1)
    new_group = np.ones(n, bool)
    new_group[1:] = (nid[1:] != nid[:-1]) | (tid[1:] != tid[:-1])
    group = np.cumsum(new_group) - 1
    cum = np.cumsum(step)
    base = (cum - step)[new_group][group]  # running level before each group's first event
    level = cum - base
    level = np.where(enter, level, level + 1)  # an exit's level is the level it closes
    o2 = np.lexsort((np.arange(n), level, group))
    g2, l2, e2 = group[o2], level[o2], enter[o2]
    same = np.zeros(n, bool)
    same[:-1] = (g2[:-1] == g2[1:]) & (l2[:-1] == l2[1:])
    is_pair = np.zeros(n, bool)
    is_pair[:-1] = e2[:-1] & ~e2[1:] & same[:-1]
    starts_idx = o2[np.nonzero(is_pair)[0]]
    ends_idx = o2[np.nonzero(is_pair)[0] + 1]
    paired = np.zeros(n, bool)
    paired[starts_idx] = True
    paired[ends_idx] = True
    open_idx = np.nonzero(enter & ~paired)[0]
    s_idx = np.concatenate([starts_idx, open_idx])
    end_t = np.concatenate([-val[ends_idx], np.full(len(open_idx), open_end, np.int64)])
    unclosed = np.concatenate([np.zeros(len(starts_idx), bool), np.ones(len(open_idx), bool)])
    return nid[s_idx], tid[s_idx], val[s_idx], end_t, unclosed


def decode_app(spool_dir: Path, ctx: DecodeContext, end_info: dict[str, Any] | None) -> dict[str, pa.Table]:
    """Phases, marks and steps of one process."""
    events_path = spool_dir / f"{ctx.pid}.events.spool"
    strings = (
        spool.read_strings(spool_dir / f"{ctx.pid}.strings.jsonl")
        if (spool_dir / f"{ctx.pid}.strings.jsonl").exists()
        else {}
    )
    if not events_path.exists():
        return {}
    try:
        blocks, torn = spool.read_event_blocks(events_path)
    except ValueError as e:
        raise InputError(f"{events_path}: {e}") from None
    if torn:
        ctx.notes.append(f"process {ctx.pid}: the spool ended inside a write (killed while flushing)")
    off = ctx.offset_ns
    last_mono = max((int(np.abs(b.values).max()) for b in blocks if len(b.values)), default=0)
    if end_info and end_info.get("end_ns"):
        open_end_epoch = int(end_info["end_ns"])
    else:
        open_end_epoch = last_mono + off if last_mono else int(ctx.session.get("start_ns", 0))

    def names_of(ids: np.ndarray) -> pa.Array:
        lookup = {i: strings.get(i, f"<name {i}>") for i in np.unique(ids).tolist()}
        return pa.array([lookup[i] for i in ids.tolist()], pa.string()) if len(ids) else pa.array([], pa.string())

    out: dict[str, pa.Table] = {}
    ph = [b for b in blocks if b.kind == spool.PHASE]
    if ph:
        nid = np.concatenate([np.full(len(b.values), b.a, np.int64) for b in ph])
        tid = np.concatenate([np.full(len(b.values), b.b, np.int64) for b in ph])
        val = np.concatenate([b.values for b in ph]).astype(np.int64)
        p_nid, p_tid, p_start, p_end, unclosed = pair_phase_events(nid, tid, val, open_end_epoch - off)
        if unclosed.any():
            ctx.notes.append(f"process {ctx.pid}: {int(unclosed.sum())} phase(s) were still open at the end")
        n = len(p_nid)
        names, sources = hook_names_and_sources(names_of(p_nid).to_pylist())
        out["phases"] = pa.table(
            {
                "rank": pa.array(np.full(n, ctx.rank, np.int32)),
                "pid": pa.array(np.full(n, ctx.pid, np.int64)),
                "tid": p_tid,
                "start_ns": p_start + off,
                "end_ns": np.maximum(p_end + off, p_start + off),
                "name": pa.array(names, pa.string()),
                "kind": pa.array(["range"] * n),
                "source": pa.array(sources, pa.string()),
                "domain": pa.array(
                    [PROCESS_DOMAIN if ctx.session.get("owner") == "cli-parent" else None] * n, pa.string()
                ),
            }
        )
    mk = [b for b in blocks if b.kind == spool.MARK]
    if mk:
        nid = np.concatenate([np.full(len(b.values), b.a, np.int64) for b in mk])
        tid = np.concatenate([np.full(len(b.values), b.b, np.int64) for b in mk])
        ts = np.concatenate([b.values for b in mk]).astype(np.int64) + off
        n = len(ts)
        marks = pa.table(
            {
                "rank": pa.array(np.full(n, ctx.rank, np.int32)),
                "pid": pa.array(np.full(n, ctx.pid, np.int64)),
                "tid": tid,
                "start_ns": ts,
                "end_ns": ts,
                "name": names_of(nid),
                "kind": pa.array(["mark"] * n),
                "source": pa.array(["dlscope"] * n),
            }
        )
        out["phases"] = (
            pa.concat_tables([out["phases"], marks], promote_options="default") if "phases" in out else marks
        )
    st = [b for b in blocks if b.kind == spool.STEP]
    if end_info is None:  # killed: its ledger has the steps it completed after its last flush
        st = ledger_steps(spool_dir, ctx, st)
    explicit = [b for b in st if b.a == spool.STEP_EXPLICIT]
    st = explicit or st  # steps the program marked itself win over optimizer steps
    if st:
        bounds = np.sort(np.concatenate([b.values for b in st]).astype(np.int64)) + off
        ctx.steps_completed = len(bounds)
        ctx.last_step_ns = int(bounds[-1])
        step_tid = st[0].b
        source = spool.STEP_SOURCES.get(st[0].a, "dlscope")
        sched_d = ctx.session.get("schedule") or {}
        sched = StepSchedule(int(sched_d.get("start", 0)), sched_d.get("stop"), int(sched_d.get("warmup", 0)))
        starts = np.concatenate([[int(ctx.session["start_ns"])], bounds[:-1]])
        idx = np.arange(len(bounds))
        actions = [sched.action(int(i)) for i in idx]
        keep = np.array([a is not Action.SKIP for a in actions], bool)
        n = int(keep.sum())
        out["steps"] = pa.table(
            {
                "rank": pa.array(np.full(n, ctx.rank, np.int32)),
                "step": pa.array(idx[keep].astype(np.int32)),
                "start_ns": starts[keep],
                "end_ns": bounds[keep],
                "pid": pa.array(np.full(n, ctx.pid, np.int64)),
                "tid": pa.array(np.full(n, step_tid, np.int64)),
                "source": pa.array([source] * n),
                "warmup": pa.array([a is Action.WARMUP for a, k in zip(actions, keep) if k], pa.bool_()),
            }
        )
    return out


def ledger_steps(spool_dir: Path, ctx: DecodeContext, spooled: list[spool.Block]) -> list[spool.Block]:
    """The step boundaries of a process that did not stop cleanly: those of its step ledger
    (``PID.steps.spool``, written as each step ended) where it holds more than the events spool,
    whose last flush came up to a second before the kill."""
    path = spool_dir / f"{ctx.pid}.steps.spool"
    try:
        ledger = [b for b in spool.read_event_blocks(path)[0] if b.kind == spool.STEP]
    except (OSError, ValueError):  # none (a recording of an older dlscope), or damaged: the spool's
        return spooled
    n_ledger, n_spooled = _boundaries(ledger), _boundaries(spooled)
    if n_ledger <= n_spooled:
        return spooled
    more = n_ledger - n_spooled
    ctx.notes.append(
        f"process {ctx.pid}: {more} step{'s' if more != 1 else ''} after its last flush kept from its "
        "step ledger (its phases and other events end at that flush)"
    )
    return ledger


def _boundaries(blocks: list[spool.Block]) -> int:
    """Step boundaries of the kind decode_app uses: explicit ones where there are any."""
    explicit = [b for b in blocks if b.a == spool.STEP_EXPLICIT]
    return sum(len(b.values) for b in explicit or blocks)


TRACE_DOMAIN = "trace"


def hook_names_and_sources(names: list[str]) -> tuple[list[str], list[str]]:
    """Phase names with :data:`~.torch_hooks.HOOK_PREFIX` stripped, and each row's source
    ('hook' for those, 'dlscope' for the program's own phases)."""
    k = len(HOOK_PREFIX)
    return (
        [x[k:] if x.startswith(HOOK_PREFIX) else x for x in names],
        [HOOK_SOURCE if x.startswith(HOOK_PREFIX) else "dlscope" for x in names],
    )


def drop_derived_where_hooked(phases: pa.Table | None) -> pa.Table | None:
    """A process whose hooks recorded its phases in every step keeps those: the same phases
    derived from its Kineto trace (traced steps only, other boundaries) are dropped, so traced
    and untraced steps are split alike."""
    if phases is None or not phases.num_rows or "source" not in phases.column_names:
        return phases
    import pyarrow.compute as pc

    src = phases.column("source")
    hooked = set(pc.unique(phases.filter(pc.equal(src, HOOK_SOURCE)).column("name")).to_pylist())
    if not hooked:
        return phases
    derived = pc.and_(pc.equal(src, "derived"), pc.is_in(phases.column("name"), pa.array(sorted(hooked))))
    return phases.filter(pc.invert(pc.fill_null(derived, False)))


def flag_traced_steps(steps: pa.Table, phases: pa.Table | None) -> pa.Table:
    """``traced``: the step overlaps a window in which detailed tracing ran (phases of domain
    'trace', written by the collectors that trace)."""
    traced = np.zeros(steps.num_rows, bool)
    if phases is not None and phases.num_rows and "domain" in phases.column_names:
        dom = phases.column("domain").to_pylist()
        win = [
            (s, e)
            for s, e, d in zip(phases.column("start_ns").to_pylist(), phases.column("end_ns").to_pylist(), dom)
            if d == TRACE_DOMAIN
        ]
        s0 = steps.column("start_ns").to_numpy()
        s1 = steps.column("end_ns").to_numpy()
        for a, b in win:
            traced |= (s0 < b) & (s1 > a)
    t = steps.drop_columns(["traced"]) if "traced" in steps.column_names else steps
    return t.append_column("traced", pa.array(traced))


def _batch_size(settings: dict[str, Any], meta: Meta) -> tuple[int | None, str | None]:
    """The run's batch size and where it came from: the one the user gave, else the one the phase
    hooks read from the program's DataLoader at its first batch (:mod:`.batch_size`)."""
    if settings.get("batch_size") is not None:
        return settings["batch_size"], GIVEN
    hooks = meta.collectors.get(TorchPhaseHooks.name)
    found = (hooks.settings.get("batch") if hooks is not None else None) or {}
    if isinstance(found.get("size"), int) and found["size"] > 0:
        return found["size"], str(found.get("source") or "")
    return None, None


def _merge_status(meta: Meta, name: str, st: CollectorStatus) -> None:
    prev = meta.collectors.get(name)
    rank = {"ok": 3, "failed": 2, "unavailable": 1, "off": 0}
    if prev is None or rank.get(st.status, 0) > rank.get(prev.status, 0):
        meta.collectors[name] = st


RANKED = ("env", "torch.distributed")  # a session's rank_source when its process is a rank of a job


def _device_of(kernels: pa.Table | None, session: dict[str, Any]) -> int | None:
    """The physical GPU (NVML's index) a rank used: the device most of its kernels ran on, else
    the torchrun convention ``cuda:LOCAL_RANK``; through ``CUDA_VISIBLE_DEVICES`` when set."""
    dev = None
    if kernels is not None and kernels.num_rows and "device" in kernels.column_names:
        vals = [d for d in kernels.column("device").to_pylist() if d is not None and d >= 0]
        if vals:
            dev = max(set(vals), key=vals.count)
    if dev is None and session.get("local_rank") is not None:
        dev = int(session["local_rank"])
    if dev is None:
        return None
    visible = [v.strip() for v in str(session.get("cuda_visible_devices") or "").split(",") if v.strip()]
    if visible:
        if dev >= len(visible) or not visible[dev].isdigit():
            return None  # a UUID or an index past the list: no safe mapping
        dev = int(visible[dev])
    return dev


def rank_end(spool_dir: Path, ctx: DecodeContext, end_info: dict[str, Any] | None) -> RankEnd:
    """How one rank ended: its launcher's record of its exit (:mod:`.child_exits`) where there is
    one, else what the rank wrote when it stopped (a SIGTERM it handled says so); a rank that
    wrote nothing was killed, and its time is that of its last step boundary."""
    end = RankEnd(rank=ctx.rank, pid=ctx.pid, clean_stop=end_info is not None, steps_completed=ctx.steps_completed)
    seen = read_exit(spool_dir, ctx.pid)
    if seen is not None:
        rc, end.end_ns = seen
        end.exit_code, end.signal = exit_status(rc), (-rc if rc < 0 else None)
    elif end_info is not None:
        end.end_ns = int(end_info.get("end_ns") or 0) or None
        if end_info.get("reason") == "SIGTERM":  # it stopped its recording, then died of the signal again
            end.signal = int(signal.SIGTERM)
            end.exit_code = exit_status(-end.signal)
    else:
        end.end_ns = ctx.last_step_ns
    return end


def counters_to_ranks(counters: pa.Table, rank_devices: dict[int, int]) -> pa.Table:
    """Give each GPU's counter rows (sampled once per host by the dlscope parent) the rank that
    used that GPU; GPUs no rank used keep the parent's rank."""
    dev = counters.column("device").to_numpy(zero_copy_only=False)
    rank = counters.column("rank").to_numpy(zero_copy_only=False).copy()
    for d, r in rank_devices.items():
        rank[dev == d] = r
    return counters.set_column(counters.schema.get_field_index("rank"), "rank", pa.array(rank.astype(np.int32)))


def finalize_profile(
    profile_dir: str | Path,
    *,
    command: list[str] | None = None,
    exit_code: int | None = None,
    run_end: RunEnd | None = None,
) -> Path:
    """Build ``profile_dir`` from its spool and remove the spool. Raises InputError if there is
    nothing to finalize. ``run_end``: how the program ended (its exit code wins over ``exit_code``);
    its ``steps_completed`` is counted here."""
    profile_dir = Path(profile_dir)
    spool_dir = profile_dir / "spool"
    pids = spool.spool_pids(spool_dir) if spool_dir.is_dir() else []
    if not pids:
        raise InputError(f"{profile_dir}: no recording to finalize (no spool)")
    builder = ProfileBuilder()
    meta = Meta(source="recorded", dlscope_version=__version__)
    meta.clock = {"domain": "unix_epoch_ns", "offsets": {}}
    starts, ends, ranks = [], [], set()
    main_settings: dict[str, Any] | None = None
    sessions = {pid: _read_json(spool_dir / f"{pid}.session.json") for pid in pids}
    distributed_job = any(s.get("rank_source") in RANKED for s in sessions.values() if s)
    # a launcher's (or the CLI's) own rows go under this host's lowest rank: on a host of a
    # multi-host job that is not rank 0, which another host's profile holds (dlscope merge)
    home_rank = min(
        (int(s.get("rank", 0)) for s in sessions.values() if s and s.get("rank_source") in RANKED), default=0
    )
    rank_devices: dict[int, int] = {}
    steps_completed = 0
    rank_ends: list[RankEnd] = []
    host_tables: list[tuple[int, dict[str, pa.Table]]] = []
    for pid in pids:
        session = sessions[pid]
        if session is None:
            meta.note(f"process {pid}: unreadable session file, skipped")
            continue
        end_info = _read_json(spool_dir / f"{pid}.end.json")
        if session.get("world_size"):
            meta.world_size = max(meta.world_size or 0, int(session["world_size"]))
        not_a_rank = (
            distributed_job and session.get("owner") != "cli-parent" and session.get("rank_source") not in RANKED
        )
        rank = (
            home_rank if distributed_job and session.get("rank_source") not in RANKED else int(session.get("rank", 0))
        )
        ctx = DecodeContext(pid=pid, rank=rank, offset_ns=int(session["clock"]["offset_ns"]), session=session)
        if end_info is None:
            ctx.notes.append(f"process {pid} stopped without a clean exit (killed?); its data ends at its last flush")
        meta.clock["offsets"][str(pid)] = session["clock"]
        starts.append(int(session["start_ns"]))
        ranks.add(ctx.rank)
        meta.host = meta.host or str(session.get("host", ""))
        settings = (end_info or {}).get("settings") or session.get("settings") or {}
        if session.get("owner") != "cli-parent" and main_settings is None:
            main_settings = settings
            meta.command = meta.command or session.get("argv")
        t0 = time.perf_counter()
        tables = decode_app(spool_dir, ctx, end_info)
        meta.timed("decode.app", time.perf_counter() - t0)
        steps_completed = max(steps_completed, ctx.steps_completed)
        if session.get("rank_source") in RANKED and session.get("owner") != "cli-parent":
            rank_ends.append(rank_end(spool_dir, ctx, end_info))
        if not_a_rank:
            # a process of the job that never had a rank (mp.spawn's parent): its phases are kept,
            # its steps and detail would collide with rank 0's
            tables = {"phases": tables["phases"]} if "phases" in tables else {}
            ctx.notes.append(
                f"process {pid} is not a rank of the distributed job (a launcher): only its "
                f"phases are kept, under rank {home_rank}"
            )
        for cls in [] if not_a_rank else COLLECTORS:
            t0 = time.perf_counter()
            try:
                for name, t in cls.decode(spool_dir, pid, ctx).items():
                    tables[name] = (
                        pa.concat_tables([tables[name], t], promote_options="default") if name in tables else t
                    )
            except Exception as e:  # one collector's broken file must not lose the others
                ctx.notes.append(f"process {pid}: could not decode {cls.name} data ({e.__class__.__name__}: {e})")
            meta.timed(f"decode.{cls.name}", time.perf_counter() - t0)
        for stage, secs in ctx.timings.items():
            meta.timed(f"decode.{stage}", secs)
        if "phases" in tables:
            tables["phases"] = drop_derived_where_hooked(tables["phases"])
            tables = merge_forward_calls(tables)  # one forward per pass: the loss module's call is in it
        if "steps" in tables:
            tables["steps"] = flag_traced_steps(tables["steps"], tables.get("phases"))
        if session.get("rank_source") in RANKED:
            dev = _device_of(tables.get("kernels"), session)
            if dev is not None:
                rank_devices.setdefault(dev, ctx.rank)
        if session.get("owner") == "cli-parent":
            host_tables.append((pid, tables))  # its GPU counters go to the rank using each GPU, below
        else:
            builder.add_all(tables)
        if end_info:
            ends.append(int(end_info.get("end_ns") or 0))
            for name, st in (end_info.get("collectors") or {}).items():
                _merge_status(
                    meta,
                    name,
                    CollectorStatus(st.get("status", "failed"), st.get("reason", ""), st.get("settings") or {}),
                )
            for name, n in (end_info.get("dropped") or {}).items():
                meta.dropped[name] = meta.dropped.get(name, 0) + int(n)
            meta.frameworks.update(end_info.get("frameworks") or {})
        for note in ctx.notes:
            meta.note(note)
        for d in ctx.devices:
            meta.add_device({"rank": ctx.rank, **d})
        meta.frameworks.update(ctx.frameworks)
    for _pid, tables in host_tables:
        if "counters" in tables and rank_devices:
            tables["counters"] = counters_to_ranks(tables["counters"], rank_devices)
            ranks.update(rank_devices.values())
        builder.add_all(tables)
    settings = main_settings or {}
    sched = StepSchedule.from_options(
        tuple(settings["steps"]) if settings.get("steps") else None, settings.get("warmup")
    )
    meta.batch_size, meta.batch_size_source = _batch_size(settings, meta)
    meta.warmup_steps = sched.warmup
    meta.step_window = [sched.start, sched.stop] if sched.windowed else None
    meta.key_node = settings.get("key_node")
    meta.start_ns = min(starts) if starts else None
    meta.end_ns = max(ends) if ends else int(time.time_ns())
    meta.ranks = sorted(ranks) or [0]
    meta.exit_code = exit_code
    if run_end is not None:
        meta.run_end = replace(
            run_end,
            steps_completed=steps_completed,
            ranks=sorted(rank_ends, key=lambda r: (r.rank, r.pid)) if distributed_job else [],
        )
        meta.exit_code = run_end.exit_code
    if command is not None:
        meta.command = command
    builder.write(profile_dir, meta)
    remove_spool(profile_dir)
    return profile_dir
