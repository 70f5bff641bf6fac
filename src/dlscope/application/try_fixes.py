"""The `try` use case: measure what each advised fix saves by running the program unchanged and with
each fix applied (without changing its source), alternated, and store the outcomes in the baseline
run's profile (the ``tries`` table).

Rounds: each round runs the baseline and every fix still undecided, once each, in an order that
rotates from round to round. By default the rounds are sequential (:mod:`..analysis.compare.
sequential`): after each round from the second, every fix's rounds so far are looked at, and a fix
whose interval excludes zero (``saves``, ``costs``) or lies within -5..+5% (``no effect``) is not run
again; the rounds end when every fix has a verdict, or after ``max_rounds`` (the rest ``undecided``).
``repeat`` instead runs exactly that many rounds, with one test at the end (the fixed-rounds test of
earlier versions, at the full 5%): for a comparison that must not stop early. A fix whose run failed
or did not apply is not run again either: more rounds cannot change that."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..vocabulary.names import FixName, RuleId

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..advice.finding import Finding
    from ..analysis.compare.sequential import Plan
    from ..analysis.compare.tries import FixOutcome, Run
    from ..capture.launcher import Placement, ProfiledRun, StderrTail


@dataclass(frozen=True)
class FixChoice:
    """The fixes ``--fixes`` asks for: ``auto`` (those of the findings that fire) and fixes by name."""

    auto: bool
    named: tuple[FixName, ...] = ()


def fix_names(text: str) -> FixChoice:
    """``--fixes`` ("auto" or names of :data:`capture.fixes.BY_NAME`, comma-separated) as a choice."""
    from ..capture.fixes import BY_NAME
    from ..errors import UsageError

    asked = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in asked if f != "auto" and f not in BY_NAME]
    if unknown:
        raise UsageError(f"unknown fix {unknown[0]!r} (known: auto, {', '.join(BY_NAME)})")
    return FixChoice("auto" in asked, tuple(FixName(f) for f in asked if f != "auto"))


@dataclass(frozen=True)
class GivenAdvice:
    """``--baseline PROFILE``: a recent profile of the same command, whose advice stands in for the
    profiled first run's (which fixes ``auto`` tries, the savings predicted). Its step times are not
    paired with the runs of the rounds: a ``dlscope profile`` run warms up, traces and stops otherwise
    than a run of ``try``, so round 0's baseline runs unprofiled like every other round's."""

    path: Path
    predicted: dict[RuleId, float]  # saving per rule that fired (%)
    # the fixes the findings that count name (not negligible, a saving above zero): what auto tries
    advised: list[FixName]


def given_advice(path: Path, cmd: list[str]) -> GivenAdvice:
    """The advice of the profile ``path`` for a try of ``cmd``: refused with one line (exit 2) when it
    cannot be read, was made from another command, or has no steps."""
    from ..analysis.core.context import ProfileData
    from ..errors import UsageError
    from .advise import advise

    data = ProfileData.open(path)  # a missing or damaged profile: InputError, one line
    made = data.stored.meta.command
    if made is None:
        raise UsageError(f"--baseline {path}: the profile does not record the command it ran (imported?)")
    if list(made) != list(cmd):
        raise UsageError(f"--baseline {path}: made from another command ({' '.join(made)}), not {' '.join(cmd)}")
    if not data.step_count():
        raise UsageError(f"--baseline {path}: the profile has no steps, so its advice predicts no saving per step")
    predicted, advised = _advised(advise(data).findings)
    return GivenAdvice(path, predicted, advised)


def _advised(found: list[Finding]) -> tuple[dict[RuleId, float], list[FixName]]:
    """Findings as try uses them: saving per rule (%), and the fixes that the findings that count name
    (each finding's own: a rule's fix is left out where the finding's evidence is beyond it)."""
    return (
        {f.id: f.saving_pct for f in found if f.saving_pct is not None},
        [n for f in found if not f.negligible and (f.saving_pct or 0) > 0 for n in f.try_fixes],
    )


# Steps every run leaves out before measuring: the baseline's first run traces steps 1-5 after
# its warm-up step (the default mode's window), and the others skip as many, so that every run is
# measured over the same steps of the program.
WARMUP_STEPS = 6
# Rounds at most by default: a fix 15% faster than a program whose runs spread by about 12% (the
# sd of a round's log ratio 0.1) is decided in 95% of simulated tries, after 6 rounds on average
# (tests/test_sequential.py); each round more costs every undecided fix a run.
DEFAULT_MAX_ROUNDS = 8
# runs of each GPU's next batch of rounds started ahead of the look between batches: two, so that one
# is left where the look decides the first one's fix (on the BERT-like program, 3 of 5 looks did)
HELD_THROUGH_LOOK = 2


@dataclass
class _Started:
    """A run under way: its label and round, profile, stderr tail and process."""

    label: str
    round: int
    path: Path
    tail: StderrTail
    run: ProfiledRun
    launched_ns: int  # wall clock, as the profile's times
    number: int = 0  # its number in the progress lines


@dataclass(frozen=True)
class RunClock:
    """Where one run's wall time went (s), for ``--format json``'s ``runs``: what a run costs
    beyond its measured steps is what bounds the rounds a try fits in its minutes."""

    started_s: float  # after the try's start
    waited_s: float | None  # started ahead of its turn: how long it waited, its imports done (else None)
    to_first_step_end_s: float | None  # the program's own set-up (imports, model, device) and first step
    steps_s: float | None  # its other steps, the rest of the warm-up included
    to_exit_s: float | None  # from its last step until its process was seen to end
    finalize_s: float  # its profile written and read, in dlscope try's process


def run_clock(
    run: Run, launched_ns: int, exited_ns: int, read_ns: int, try_start_ns: int, went_ns: int | None = None
) -> RunClock:
    """A finished run's :class:`RunClock` from its launch, exit and read times, when it was let go
    (``went_ns``: one started ahead) and its profile's steps."""

    def s(a: int | None, b: int | None) -> float | None:
        return round((b - a) / 1e9, 3) if a is not None and b is not None else None

    first, last = run.steps_ns or (None, None)
    return RunClock(
        started_s=round((launched_ns - try_start_ns) / 1e9, 3),
        waited_s=s(launched_ns, went_ns),
        to_first_step_end_s=s(went_ns or launched_ns, first),
        steps_s=s(first, last),
        to_exit_s=s(last, exited_ns),
        finalize_s=round((read_ns - exited_ns) / 1e9, 3),
    )


def _stderr_file() -> Any:
    """Our standard error as a file a child can write to (a notebook's stream has no descriptor:
    then the process's own)."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__


class Trial:
    """The runs of one ``dlscope try``: the baseline's profiled run, the alternations, the
    combined fixes; then the outcomes, written into the first run's profile (``tries``)."""

    def __init__(
        self,
        cmd: list[str],
        out: Path,
        steps: int,
        repeat: int | None,
        asked: FixChoice,
        combined: bool,
        quiet: bool = False,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        placements: list[Placement] | None = None,
        given: GivenAdvice | None = None,
    ) -> None:
        """``placements``: one per GPU when rounds run at once, a round to a GPU (try_placement.py);
        none or one: the rounds run one after another. ``given``: the advice of ``--baseline``, in
        place of a profiled first run."""
        from ..analysis.compare.sequential import Plan

        self.cmd, self.out, self.steps, self.repeat = cmd, out, steps, repeat
        # repeat: exactly that many rounds and one look at the end; None: a look after every round
        self.max_rounds = repeat if repeat is not None else max_rounds
        self.sequential = repeat is None
        # sequential: a look after each batch of rounds, one round per GPU (Plan.every)
        every = max(1, len(placements or []))
        self.plan: Plan | None = (
            Plan(max_rounds, min(max(2, every), max_rounds), every=every)
            if repeat is None
            else Plan(repeat, repeat)
            if repeat >= 2
            else None
        )
        self.rounds_run = 0
        self.asked, self.combined, self.quiet = asked, combined, quiet
        self.runs: list[Run] = []
        self.interrupted = False
        self.fix_options: dict[FixName, dict[str, Any]] = {}  # per fix: the advice's predicted saving
        self.placements = placements or []
        self.launched = 0  # runs started, for the progress lines
        self.given = given
        self.started_ns = time.time_ns()
        # what a run started ahead imports (None: runs start at their turn): the first run's frameworks,
        # then their modules an earlier run's mark named (capture/turn.py)
        self.preimport: tuple[str, ...] | None = None
        self.clocks: dict[tuple[str, int], RunClock] = {}  # (label, round) -> where its time went
        self.imported: tuple[str, ...] = ()  # the modules the first run to say so had imported
        # each GPU's first runs of the next batch of rounds as foreseen, started ahead of the look between
        self.next_heads: list[list[tuple[str, int, list[FixName]]]] = []
        self.held: dict[int, list[_Started]] = {}

    def say(self, msg: str) -> None:
        # on stderr whatever the format: with --format json stdout is the result alone, and a run of
        # minutes that says nothing, or is stopped before its JSON, leaves nothing to read
        print(f"dlscope try: {msg}", file=sys.stderr, flush=True)

    def run(self) -> dict[str, Any]:
        from ..analysis.compare.sequential import Verdict
        from ..analysis.compare.tries import measure, run_spread_pct
        from ..capture.fixes import BY_NAME, FIXES

        first: Run | None = None
        if self.given is None and len(self.placements) > 1 and self.max_rounds > 1:
            # the second GPU would wait for the profiled run: round 1's baseline runs there meanwhile
            first = self._run_together([("baseline", 0, [], 0), ("baseline", 1, [], 1)], traced={0})[0]
            predicted, advised = self._advice(first)
        elif self.given is None:
            first = self._run("baseline", 0, [], traced=True)
            predicted, advised = self._advice(first)
        else:
            predicted, advised = self.given.predicted, self.given.advised
            self.say(f"advice from {self.given.path} (--baseline): the program is not profiled again")
        advised_from = Path(first.profile) if first else self.given.path if self.given else None
        self.preimport = self._with_imports(_frameworks(advised_from, self.cmd))
        # a fix with a size (DataLoader workers) is sized to the saving the advice predicted for it
        self.fix_options = {n: {"predicted_saving_pct": _predicted(predicted, f.rules)} for n, f in BY_NAME.items()}
        if self.asked.auto:
            names = [f.name for f in FIXES if not f.on_request_only and f.name in advised]
            names += [n for n in self.asked.named if n not in names]
        else:
            names = list(self.asked.named)
        self.say(f"fixes to try: {', '.join(names) or 'none (no finding has a fix dlscope can apply)'}")
        labels: dict[str, list[FixName]] = {n: [n] for n in names}  # gains "combined" once two fixes saved
        self.rounds_run = self._rounds(["baseline", *names], 0, labels)
        base = [r for r in self.runs if r.label == "baseline"]
        outcomes = [
            measure(
                n,
                list(BY_NAME[n].rules),
                base,
                [r for r in self.runs if r.label == n],
                _predicted(predicted, BY_NAME[n].rules),
                BY_NAME[n].changes_precision,
                self.plan,
            )
            for n in names
        ]
        helped = [
            n
            for n, o in zip(names, outcomes)
            if o.applied
            and o.significant
            and (o.measured_saving_pct or 0) > 0
            and o.verdict in (None, Verdict.SAVES)
            and not o.loss_diverged
        ]
        together = None
        if self.combined and "combined" not in labels and len(helped) > 1 and not self.interrupted:
            # the fixes saved only at the rounds' end (or with fixed rounds): their own rounds after
            labels["combined"] = list(helped)
            self._rounds(["combined", "baseline"], self.rounds_run, {"combined": labels["combined"]})
        if "combined" in labels:
            base = [r for r in self.runs if r.label == "baseline"]
            together = measure(
                "combined",
                [],
                base,
                [r for r in self.runs if r.label == "combined"],
                None,
                any(BY_NAME[n].changes_precision for n in labels["combined"]),
                self.plan,
            )
            together.reason = "+".join(labels["combined"])
            together.agrees = None  # no prediction for the fixes together
        if self.interrupted:
            self.say("interrupted: the runs so far are measured; the rest did not run")
        # the outcomes go into the profiled first run's profile, or (--baseline: the given profile is left
        # as it is) into round 0's baseline run's
        home = first or next((r for r in self.runs if r.label == "baseline"), None)
        self._store(home, outcomes)
        spread = run_spread_pct([r for r in self.runs if r.label == "baseline"])
        result = {
            "command": self.cmd,
            "steps": self.steps,
            "repeat": self.repeat,
            "max_rounds": self.max_rounds,
            "sequential": self.sequential,
            "rounds": self.rounds_run,
            "interrupted": self.interrupted,
            "baseline_spread_pct": spread,
            "profiles": str(self.out),
            "advice_from": str(self.given.path) if self.given else first.profile if first else None,
            "fixes": [o.as_dict() for o in outcomes],
            "combined": together.as_dict() if together else None,
            "runs": [
                {
                    "label": r.label,
                    "round": r.round,
                    "exit_code": r.exit_code,
                    "median_ms": r.median_ms,
                    "steps": len(r.steps_ms),
                    "profile": r.profile,
                    "clock": asdict(self.clocks[r.label, r.round]) if (r.label, r.round) in self.clocks else None,
                }
                for r in self.runs
            ],
        }
        if not self.quiet:
            from ..render.terminal import console
            from ..render.tries import render_tries

            render_tries(
                outcomes, together, console(), self.interrupted, spread, self.plan if self.sequential else None
            )
        return result

    # ---- the rounds -----------------------------------------------------------------------------
    def _rounds(self, order: list[str], first: int, fixes: dict[str, list[FixName]]) -> int:
        """Rounds of the runs ``order`` names (``baseline`` and the labels of ``fixes``: label ->
        fixes it applies), rotated by one each round, numbered from ``first``; the baseline's run of
        round 0 is the profiled one, already made (unless ``--baseline`` gave the advice). A label
        leaves once its look is decided (or its run failed), or after max_rounds of its own; the
        rounds end when none is left. With ``combined``, as soon as two fixes have saved, the fixes
        that saved join the rounds together as one more label (``combined``), compared with the same
        baseline runs as the others rather than with baseline runs of its own after them. Returns
        rounds run."""
        active = [label for label in order if label in fixes]
        joined = dict.fromkeys(active, 0)  # the round (counted from first) each label's rounds start at
        saved: list[str] = []
        done = 0
        while active and not self.interrupted:
            # the next rounds, one per GPU: each round's runs in its rotated order on its own GPU
            rounds = self._batch(order, active, joined, done, first)

            def queues(batch: list[tuple[int, list[str]]]) -> list[list[tuple[str, int, list[FixName]]]]:
                return [[(label, first + k, fixes.get(label, [])) for label in labels] for k, labels in batch]

            # the batch after, were no label to leave at the look between: each GPU's first runs of it are
            # started ahead as its last run of this one goes on (called off if the look leaves them out)
            foreseen = queues(self._batch(order, active, joined, done + len(rounds), first))
            self.next_heads = [q[:HELD_THROUGH_LOOK] for q in foreseen]
            # one queue per GPU, each taking its next run as soon as it is free
            self._run_queues(queues(rounds))
            done += len(rounds)
            for label in list(active):
                stop, saves = self._stops(label, first + joined[label])
                if stop:
                    active.remove(label)
                    saved += [label] if saves and label != "combined" else []
                    self.say(f"{label}: {stop}")
                elif done - joined[label] >= self.max_rounds:
                    active.remove(label)
                    if self.sequential:
                        self.say(f"{label}: undecided after {self.max_rounds} rounds (--max-rounds)")
            if self.combined and "combined" not in fixes and len(saved) >= 2 and not self.interrupted:
                fixes["combined"] = [f for label in saved for f in fixes[label]]
                order.append("combined")
                active.append("combined")
                joined["combined"] = done
                self.say(f"combined: {'+'.join(saved)} saved; tried together from round {first + done + 1}")
        self._call_off_held()
        return done

    def _batch(
        self, order: list[str], active: list[str], joined: dict[str, int], done: int, first: int
    ) -> list[tuple[int, list[str]]]:
        """The rounds of the next batch, one per GPU, from round ``done`` (counted from ``first``):
        each ``(k, labels)``, its labels in their order for that round (rotated by one each round)."""
        rounds: list[tuple[int, list[str]]] = []
        for k in range(done, done + max(1, len(self.placements))):
            now = [
                label
                for label in order
                if label == "baseline" or (label in active and k - joined[label] < self.max_rounds)
            ]
            if len(now) < 2:
                break
            rotated = now[k % len(now) :] + now[: k % len(now)]
            # (round 0's baseline is the profiled first run, unless the advice was given; round 1's may
            # have run beside it)
            rounds.append((k, [label for label in rotated if not self._made(label, first + k)]))
        return rounds

    def _made(self, label: str, rnd: int) -> bool:
        """Whether the run ``label`` of round ``rnd`` was made already (the first runs, before the rounds)."""
        return any(r.label == label and r.round == rnd for r in self.runs)

    def _stops(self, label: str, first: int) -> tuple[str, bool]:
        """Why ``label`` needs no more runs ('' while it does), and whether it saved: a failed or
        unapplied run, or a decided look of the sequential plan over its rounds since ``first`` (a
        saving whose losses diverged from the baseline's does not count as one)."""
        from ..analysis.compare.sequential import Verdict
        from ..analysis.compare.tries import look_at, loss_check, loss_scale, round_pairs, samples_factor

        runs = [r for r in self.runs if r.label == label and r.round >= first]
        if any(r.exit_code != 0 for r in runs):
            return "its run failed; not run again", False
        if any(label in r.fixes and not r.fixes[label].get("applied") for r in runs):
            return "it did not apply; not run again", False
        if not self.sequential or self.plan is None:
            return "", False
        base = [r for r in self.runs if r.label == "baseline" and r.round >= first]
        seen = look_at(self.plan, round_pairs(base, runs, samples_factor(label, runs)))
        if seen is None or not seen.verdict.decided:
            return "", False
        factor = samples_factor(label, runs)
        diverged = loss_check(base, runs)[0] and not (factor != 1.0 and loss_scale(base, runs, factor))
        saves = seen.verdict == Verdict.SAVES and not diverged
        why = f"{seen.verdict.value} after {seen.rounds} rounds ({seen.low_pct:+.1f}..{seen.high_pct:+.1f}%)"
        return why, saves

    # ---- one run ------------------------------------------------------------------------------
    def _run(self, label: str, rnd: int, fixes: list[FixName], traced: bool = False) -> Run:
        """One run on the first GPU (or wherever the program goes, without placements)."""
        return self._run_together([(label, rnd, fixes, 0)], {0} if traced else set())[0]

    def _run_together(
        self, jobs: list[tuple[str, int, list[FixName], int]], traced: set[int] | None = None
    ) -> list[Run]:
        """Runs at the same time, each ``(label, round, fixes, placement index)`` on its own GPU; the
        jobs whose index is in ``traced`` are profiled (the first run, whose advice chooses the fixes)."""
        from ..capture.launcher import wait_all

        started = [
            self._start(label, rnd, fixes, where, j in (traced or set()))
            for j, (label, rnd, fixes, where) in enumerate(jobs)
        ]
        codes = wait_all([s.run for s in started])
        exited = time.time_ns()  # the last to end's: wait_all waits for them all
        return [self._finish(s, rc, exited) for s, rc in zip(started, codes)]

    def _run_queues(self, queues: list[list[tuple[str, int, list[FixName]]]]) -> None:
        """Queue q's runs ``(label, round, fixes)`` one after another on GPU q, the queues side by side:
        a GPU starts its next run when its last one ends, not when the other's does; each run after a
        queue's first is started ahead of its turn where the program is Python's (:mod:`..capture.turn`),
        and so are a queue's first where the runs held through the last batch's look
        (:attr:`next_heads`) are among its runs: those go first, in the order they were started."""
        from ..capture.launcher import run_queues

        started: dict[tuple[int, int], _Started] = {}
        held: dict[int, list[ProfiledRun]] = {}
        for q, early in list(self.held.items()):
            if q >= len(queues):
                continue
            keys = [(label, rnd) for label, rnd, _ in queues[q]]
            used = [e for e in early if (e.label, e.round) in keys]
            # (a round's order is a rotation, against drift: runs ready to go first change it by a place or two)
            queues[q] = [queues[q][keys.index((e.label, e.round))] for e in used] + [
                job for job in queues[q] if job[:2] not in [(e.label, e.round) for e in used]
            ]
            for j, e in enumerate(used):
                started[q, j] = e
            held[q] = [e.run for e in used]
            self.held[q] = [e for e in early if e not in used]
        self._call_off_held()  # the look left those out

        def starter(q: int, j: int) -> Callable[[bool], ProfiledRun]:
            def start(early: bool) -> ProfiledRun:
                label, rnd, fixes = queues[q][j]
                started[q, j] = self._start(label, rnd, fixes, q, False, self.preimport if early else None)
                return started[q, j].run

            return start

        def after(q: int) -> list[ProfiledRun]:
            heads = self.next_heads[q] if q < len(self.next_heads) else []
            if self.preimport is None:
                return []
            self.held[q] = [self._start(label, rnd, fixes, q, False, self.preimport) for label, rnd, fixes in heads]
            return [e.run for e in self.held[q]]

        def done(q: int, j: int, run: ProfiledRun, rc: int, exited_ns: int) -> None:
            self._finish(started.pop((q, j)), rc, exited_ns)

        kept = run_queues(
            [[starter(q, j) for j in range(len(queue))] for q, queue in enumerate(queues)],
            done,
            ahead=self.preimport is not None,
            held=held,
            after=after,
        )
        # what came back waiting (none where the runs were stopped: those were called off)
        self.held = {q: [e for e in early if e.run in kept.get(q, [])] for q, early in self.held.items()}

    def _call_off_held(self) -> None:
        """The runs started ahead for a batch that will not have them: ended, and said so."""
        for early in [e for runs in self.held.values() for e in runs]:
            early.run.call_off()
            self.say(f"run {early.number} ({early.label}, round {early.round + 1}) called off: the look left it out")
        self.held = {}

    def _start(
        self,
        label: str,
        rnd: int,
        fixes: list[FixName],
        where: int,
        profiled_run: bool,
        ahead: tuple[str, ...] | None = None,
    ) -> _Started:
        """Start one run (its profile ``LABEL.ROUND.dlscope``) on placement ``where``; ``ahead``: before
        its turn, importing these frameworks, until its queue lets it go on."""
        from ..capture.base import Settings, TryRun
        from ..capture.launcher import ProfiledRun, StderrTail

        path = self.out / f"{label}.{rnd}.dlscope"
        asks = TryRun(
            fixes=fixes,
            fix_options={n: self.fix_options.get(n, {}) for n in fixes},
            stop_after_step=WARMUP_STEPS + self.steps,
            record_loss=True,
        )
        settings = (
            Settings(try_run=asks) if profiled_run else Settings(warmup=WARMUP_STEPS, detail_steps=0, try_run=asks)
        )
        if not profiled_run:
            # no GPU counter sampler but the profiled run's: an untraced try run reads only its step
            # times, and runs overlap in this process (one per GPU, and the next one started ahead);
            # several NVML samplers in one process crashed it on a 2-GPU host
            settings.nvml = "off"
        placement = self.placements[where] if self.placements else None
        on = f" on GPU {placement.gpus}" if placement is not None and placement.gpus is not None else ""
        profiled = " (profiled)" if profiled_run else ""
        early = ", started ahead" if ahead is not None else ""
        self.launched += 1
        self.say(f"run {self.launched}: {label}{profiled}, round {rnd + 1}{on}{early}")
        # with --format json our stdout is the result: the program's own output goes to stderr
        tail = StderrTail()
        stdout = _stderr_file() if self.quiet else None
        launched = time.time_ns()
        run = ProfiledRun(self.cmd, path, settings, stdout, tail, placement, ahead)
        return _Started(label, rnd, path, tail, run, launched, self.launched)

    def _with_imports(self, preimport: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """``preimport`` and the modules of its frameworks the runs so far imported (None stays None:
        no run starts ahead)."""
        from ..capture.turn import ahead_imports

        return None if preimport is None else ahead_imports(preimport, self.imported)

    def _finish(self, started: _Started, rc: int, exited_ns: int) -> Run:
        """A run's profile finalized and its steps read (a run that left none is reported)."""
        if started.run.imported and not self.imported:
            # the first run to name its modules: its GPU's next runs import them all ahead
            self.imported = started.run.imported
            self.preimport = self._with_imports(self.preimport)
        run = self._read(started.label, started.round, started.path, started.tail, rc)
        self.clocks[run.label, run.round] = run_clock(
            run, started.launched_ns, exited_ns, time.time_ns(), self.started_ns, started.run.went_ns
        )
        return run

    def _read(self, label: str, rnd: int, path: Path, tail: StderrTail, rc: int) -> Run:
        from ..analysis.compare.tries import Run, read_run
        from ..capture.finalize import finalize_profile
        from ..capture.launcher import exit_status, run_end

        status = exit_status(rc)
        if rc in (-2, 130):  # Ctrl-C: the program was stopped; so is the trial
            self.interrupted = True
        try:
            finalize_profile(path, command=self.cmd, run_end=run_end(rc, tail))
        except Exception as e:  # noqa: BLE001 - a run that left no profile is reported, the others go on
            self.say(f"run {label} left no readable profile: {e}")
            run = Run(label, rnd, status or 2, [], profile=str(path))
            self.runs.append(run)
            return run
        measured = read_run(path, label, rnd, status, WARMUP_STEPS)
        self.runs.append(measured)
        return measured

    def _advice(self, first: Run) -> tuple[dict[RuleId, float], list[FixName]]:
        """The first run's findings: saving per rule (%), and the fixes they name."""
        from ..analysis.core.context import ProfileData
        from .advise import advise

        if not first.profile or not Path(first.profile, "meta.json").exists():
            return {}, []
        return _advised(advise(ProfileData.open(first.profile)).findings)

    def _store(self, first: Run | None, outcomes: list[FixOutcome]) -> None:
        """The outcomes as the ``tries`` table of the first run's profile."""
        if first is None or not first.profile or not outcomes or not Path(first.profile, "meta.json").exists():
            return
        from ..analysis.compare.tries import tries_table
        from ..store.amend import replace_table
        from ..store.meta import load_meta

        path = Path(first.profile)
        replace_table(path, load_meta(path / "meta.json"), "tries", tries_table(outcomes))


def _frameworks(profile: Path | None, cmd: list[str]) -> tuple[str, ...] | None:
    """The frameworks a run started ahead imports: those the profile of the same command recorded;
    None (no run starts ahead) unless the command is a Python interpreter's, the process whose start
    dlscope's bootstrap can hold (a shell script's Python would start its program at once), and not a
    launcher of ranks run by Python (``python -m torch.distributed.run``: its ranks are not held)."""
    from ..capture.turn import PREIMPORTED
    from ..store.meta import load_meta
    from .try_placement import launches_ranks

    if profile is None or not Path(cmd[0]).name.startswith("python") or launches_ranks(cmd):
        return None
    if not (profile / "meta.json").exists():
        return None
    recorded = load_meta(profile / "meta.json").frameworks
    return tuple(f for f in PREIMPORTED if f in recorded)


def _predicted(predicted: dict[RuleId, float], rules: tuple[RuleId, ...]) -> float | None:
    got = [predicted[r] for r in rules if r in predicted]
    return max(got) if got else None
