"""Steps of a JAX program that marks none: the runs of its repeated jit executable (issue 40).

A JAX training loop calls one jitted function per iteration, the training step. ``jax.profiler``
records each call on the host (``PjitFunction(f)``, an op ``jit(f)`` of category ``jax_function``)
and each run of the compiled module (``jit_f``, an op of category ``xla_module``: on the GPU's
streams, or on XLA:CPU's threads). Where the program annotated no steps
(``StepTraceAnnotation``), the run is tiled at the runs of one executable as ``--key-node`` tiles
(DLProf): iteration *i* ends where run *i* ends and starts where run *i - 1* ended; the first
starts at its own launch (:func:`~dlscope.store.build.key_node_steps_sql`, source
``'jit_executable'``).

A run spans its launch (the host call's start) to its completion: the later of the call's return
and its module's end. JAX dispatches asynchronously, so the module may still run, or not have
started, when the call returns; ending the iteration at the module's end puts the iteration's
boundary where a step annotation closed after ``block_until_ready`` puts it, and every kernel of
run *i* inside iteration *i*.

Which executable: among those run at least :data:`MIN_RUNS` times, the one whose module runs take
the most time (the host calls' time where no module run was recorded). The count alone would not
do: in the stored H100 profile (``tests/data/gpu_h100/jax_mlp.dlscope``) the random
initialisation's eager ``jit(add)`` ran 200 times, the training step 6 times, and took most of the
GPU time. Executables that ran as often as the one taken (a data step beside the training step,
an evaluation step) are named in the note, with their module time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from ..store.build import key_node_steps_sql
from ..vocabulary.names import StepSource

if TYPE_CHECKING:
    import pyarrow as pa

SOURCE = StepSource.JIT_EXECUTABLE  # the steps' source (steps.source)
MIN_RUNS = 2  # an executable run once is no loop
# XLA names the module of jax.jit(f) 'jit_' + f's name with the characters not allowed in an HLO
# module name replaced (jit(<lambda>) runs module jit__lambda_); pmap's modules are 'pmap_f'
_MODULE_PREFIXES = ("jit_", "pmap_")
_NOT_IN_MODULE_NAME = re.compile(r"[^\w.-]")
CALL_CATEGORY = "jax_function"
MODULE_CATEGORY = "xla_module"


@dataclass(frozen=True)
class OpEvent:
    """The op rows the derivation reads: host calls (``jax_function``) and module runs (``xla_module``)."""

    category: str
    name: str
    start_ns: int
    end_ns: int
    tid: int


@dataclass(frozen=True)
class Run:
    """One run of an executable: from its launch to its completion, on the launching thread."""

    start_ns: int
    end_ns: int
    tid: int


class TimeBasis(Enum):
    """What 'the most time' was measured on."""

    MODULE = "module time"  # the compiled module's runs (GPU streams, or XLA:CPU threads)
    HOST_CALLS = "host call time"  # no module run recorded: the host calls (their first includes compiling)


@dataclass(frozen=True)
class Executable:
    module: str  # XLA's name of it: 'jit_train_step'
    call: str | None  # the host call's name: 'jit(train_step)'; None where no call was recorded
    runs: tuple[Run, ...]
    module_ns: int  # its module runs' time (the union of a run's streams), 0 when none was recorded
    call_ns: int  # its host calls' time

    def time_ns(self, basis: TimeBasis) -> int:
        return self.module_ns if basis is TimeBasis.MODULE else self.call_ns

    def label(self) -> str:
        return f"{self.module} ({self.call})" if self.call else self.module


@dataclass(frozen=True)
class Choice:
    """The executable taken as the step, and those that ran at least as often (named in the note)."""

    taken: Executable
    basis: TimeBasis
    as_often: tuple[Executable, ...]

    def note(self) -> str:
        t = self.taken
        ms = t.time_ns(self.basis) / 1e6
        out = (
            f"steps: none annotated; derived from the {len(t.runs)} runs of the jit executable {t.label()}, "
            f"the repeated executable with the most {self.basis.value} ({ms:.3f} ms), each step ending where "
            "a run completes (as --key-node tiles)"
        )
        if self.as_often:
            others = ", ".join(
                f"{e.module} ({len(e.runs)} runs, {e.time_ns(self.basis) / 1e6:.3f} ms)" for e in self.as_often[:3]
            )
            more = len(self.as_often) - 3
            out += f"; also repeated as often or more, not taken: {others}" + (f" and {more} more" if more > 0 else "")
        return out


def module_name(call: str) -> str:
    """The module XLA compiles for a host call ``jit(f)``: ``jit_f``."""
    inner = call[len("jit(") : -1] if call.startswith("jit(") and call.endswith(")") else call
    return "jit_" + _NOT_IN_MODULE_NAME.sub("_", inner)


def _module_runs(rows: list[OpEvent]) -> list[tuple[int, int]]:
    """A module's runs from its rows: on the GPU a run has a row per stream it used, which overlap."""
    runs: list[list[int]] = []
    for r in sorted(rows, key=lambda r: (r.start_ns, r.end_ns)):
        if runs and r.start_ns < runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], r.end_ns)
        else:
            runs.append([r.start_ns, r.end_ns])
    return [(s, e) for s, e in runs]


def _pair(calls: list[OpEvent], runs: list[tuple[int, int]]) -> list[Run]:
    """Each call with the end of its module's run. As many runs as calls: in order (a run may start
    after the next call, dispatch being asynchronous); else the runs that start between the call
    and the next one."""
    runs = [r for r in runs if r[0] >= calls[0].start_ns]  # those launched before the trace started
    if len(runs) == len(calls):
        return [Run(c.start_ns, max(c.end_ns, r[1]), c.tid) for c, r in zip(calls, runs)]
    out = []
    for i, c in enumerate(calls):
        nxt = calls[i + 1].start_ns if i + 1 < len(calls) else None
        ends = [e for s, e in runs if s >= c.start_ns and (nxt is None or s < nxt)]
        out.append(Run(c.start_ns, max([c.end_ns, *ends]), c.tid))
    return out


def executables(ops: Iterable[OpEvent]) -> list[Executable]:
    """Every jit executable the trace saw run, with its runs (host calls paired with their module's
    runs; a module whose calls were not recorded, by its runs alone)."""
    calls: dict[str, list[OpEvent]] = {}
    modules: dict[str, list[OpEvent]] = {}
    for o in ops:
        if o.category == CALL_CATEGORY:
            calls.setdefault(module_name(o.name), []).append(o)
        elif o.category == MODULE_CATEGORY and o.name.startswith(_MODULE_PREFIXES):
            modules.setdefault(o.name, []).append(o)
    out = []
    for name in dict.fromkeys([*calls, *modules]):
        mruns = _module_runs(modules.get(name, []))
        module_ns = sum(e - s for s, e in mruns)
        if name in calls:
            cs = sorted(calls[name], key=lambda c: c.start_ns)
            runs = tuple(_pair(cs, mruns))
            out.append(Executable(name, cs[0].name, runs, module_ns, sum(c.end_ns - c.start_ns for c in cs)))
        else:
            tid = modules[name][0].tid
            out.append(Executable(name, None, tuple(Run(s, e, tid) for s, e in mruns), module_ns, 0))
    return out


def choose(found: list[Executable]) -> Choice | None:
    """The repeated executable with the most module time (host call time where no module ran);
    None when no executable ran :data:`MIN_RUNS` times."""
    repeated = [e for e in found if len(e.runs) >= MIN_RUNS]
    if not repeated:
        return None
    basis = TimeBasis.MODULE if any(e.module_ns for e in repeated) else TimeBasis.HOST_CALLS
    taken = max(repeated, key=lambda e: (e.time_ns(basis), len(e.runs), e.module))
    as_often = sorted(
        (e for e in repeated if e is not taken and len(e.runs) >= len(taken.runs)),
        key=lambda e: (-e.time_ns(basis), e.module),
    )
    return Choice(taken, basis, tuple(as_often))


def steps_table(choice: Choice, rank: int, pid: int) -> pa.Table:
    """The steps table (schema columns) tiled at the taken executable's runs."""
    import duckdb
    import pyarrow as pa

    from ..store.db import query_arrow

    runs = sorted(choice.taken.runs, key=lambda r: (r.end_ns, r.start_ns))
    inst = pa.table(
        {
            "rank": pa.array([rank] * len(runs), pa.int32()),
            "start_ns": pa.array([r.start_ns for r in runs], pa.int64()),
            "end_ns": pa.array([r.end_ns for r in runs], pa.int64()),
            "pid": pa.array([pid] * len(runs), pa.int64()),
            "tid": pa.array([r.tid for r in runs], pa.int64()),
        }
    )
    con = duckdb.connect(":memory:")
    try:
        con.register("runs", inst)
        return query_arrow(con, key_node_steps_sql("runs", source=SOURCE.value) + " ORDER BY step")
    finally:
        con.close()
