"""Run a command under the profiler (`dlscope profile -- CMD ...`).

The dlscope process is the parent: it prepares the spool, starts the program with the bootstrap
on PYTHONPATH (so every Python process of the command records itself), records the program's
whole run as a phase, runs host-level collectors (the NVML sampler) outside the program so they
never hold its GIL, waits, and finalizes, even when the program crashed or was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TextIO

from ..errors import UsageError
from ..store.meta import RunEnd
from . import turn
from .base import Settings
from .child_exits import exit_status as exit_status  # used by the profile and try use cases
from .session import Session

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
TAIL_BYTES = 4096  # of the program's stderr kept for its last line: a traceback's last line fits
LAST_LINE_CHARS = 300  # a longer last line is cut (it goes into meta.json and the summary)


class StderrTail:
    """Tee of the program's stderr: every byte goes on to ours as it comes, and the last
    :data:`TAIL_BYTES` are kept, so that the summary can say how a failed program ended. A thread
    copies the pipe in chunks as they come (no per-line work): the program never waits for dlscope
    beyond the pipe's buffer. Its stderr is a pipe then, not a terminal."""

    def __init__(self) -> None:
        self._tail = b""
        self._thread: threading.Thread | None = None

    def start(self, pipe: IO[bytes]) -> None:
        self._thread = threading.Thread(target=self._copy, args=(pipe,), name="dlscope-stderr", daemon=True)
        self._thread.start()

    def _copy(self, pipe: IO[bytes]) -> None:
        fd, out = pipe.fileno(), 2  # the descriptor the program would have inherited
        passing = True
        try:
            while chunk := os.read(fd, 65536):
                self._tail = (self._tail + chunk)[-TAIL_BYTES:]
                while passing and chunk:
                    try:
                        chunk = chunk[os.write(out, chunk) :]
                    except OSError:  # our stderr was closed: keep draining, or the program blocks
                        passing = False
        except OSError:
            pass
        finally:
            pipe.close()

    def join(self, timeout: float = 2.0) -> None:
        """Wait for the copy to reach the end of the pipe. A process the program left behind may
        hold the pipe open: then the copy goes on in the background and the tail so far is used."""
        if self._thread is not None:
            self._thread.join(timeout)

    def last_line(self) -> str:
        text = self._tail.decode("utf-8", "replace").replace("\r", "\n")
        lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
        last = lines[-1] if lines else ""
        return last if len(last) <= LAST_LINE_CHARS else last[: LAST_LINE_CHARS - 3] + "..."


def command_after_dashes(words: list[str]) -> list[str]:
    """The command of ``dlscope profile|try [options] -- CMD ...`` (argparse keeps the ``--``),
    normalized (:func:`normalize_command`)."""
    return normalize_command(words[1:] if words and words[0] == "--" else list(words))


def normalize_command(cmd: list[str]) -> list[str]:
    """`dlscope profile -- train.py` runs the script with this interpreter."""
    if not cmd:
        raise UsageError("no command to profile: dlscope profile [options] -- CMD [ARGS...]")
    if cmd[0].endswith(".py") and Path(cmd[0]).is_file():
        return [sys.executable, *cmd]
    return list(cmd)


def child_env(profile_dir: Path, settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")) if p)
    env["DLSCOPE_SESSION"] = json.dumps({"profile_dir": str(profile_dir.resolve()), "settings": settings.to_dict()})
    env["DLSCOPE_PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def _interactive() -> bool:
    """True when Ctrl-C reaches the program directly (same foreground process group)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class Placement:
    """Where one run goes on a host shared by concurrent runs: the GPUs it sees
    (``CUDA_VISIBLE_DEVICES``) and the CPUs it may run on (its affinity)."""

    gpus: str | None = None
    cpus: frozenset[int] | None = None


class ProfiledRun:
    """One command started under the profiler (the constructor starts it); :meth:`finish` after it
    exits stops what the parent recorded beside it. :func:`wait_all` waits for several at once."""

    def __init__(
        self,
        cmd: list[str],
        profile_dir: Path,
        settings: Settings,
        stdout: TextIO | None = None,
        stderr_tail: StderrTail | None = None,
        placement: Placement | None = None,
        ahead: tuple[str, ...] | None = None,
    ) -> None:
        """``ahead``: started before its turn (:mod:`.turn`): the program imports these modules, then
        waits for :meth:`go` (or :meth:`call_off`). :attr:`imported`, once finished: the modules the
        program named in its mark (:func:`.turn.mark_measured`), for its next runs to import ahead."""
        from . import COLLECTORS

        host_collectors = [c for c in COLLECTORS if c.scope == "host"]
        self._parent = Session(profile_dir, settings, owner="cli-parent", collectors=host_collectors)
        self._parent.start()
        self._run_range = self._parent.recorder.thread_ranges()[shlex.join(cmd)[:200]]
        self._live = None
        self._tail = stderr_tail
        if settings.live:
            from .live_view import LiveView

            self._live = LiveView(profile_dir / "spool").start()
        env = child_env(profile_dir, settings)
        where = placement or Placement()
        if where.gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = where.gpus
        cpus = where.cpus
        self.profile_dir = profile_dir
        self._go: int | None = None  # the pipe's end a run started ahead waits on
        self.went_ns: int | None = None  # when a run started ahead was let go (wall clock)
        self.imported: tuple[str, ...] = ()
        wait_fd = None
        if ahead is not None:
            wait_fd, self._go = os.pipe()
            env[turn.ENV] = turn.turn_env(wait_fd, turn.write_preimport(profile_dir, ahead))
        try:
            self._run_range.__enter__()
            self.proc = subprocess.Popen(
                cmd,
                env=env,
                stdout=stdout,
                stderr=subprocess.PIPE if stderr_tail is not None else None,
                pass_fds=(wait_fd,) if wait_fd is not None else (),
            )
        except OSError as e:
            if self._go is not None:
                os.close(self._go)
                self._go = None
            self.finish()
            raise UsageError(f"cannot run {cmd[0]!r}: {e.strerror or e}") from None
        finally:
            if wait_fd is not None:
                os.close(wait_fd)
        if cpus:
            # the child's CPUs, set from here as it starts (its threads, made later, inherit them): not
            # in a preexec_fn, which is unsafe in a process with threads (ours: DuckDB's, the stderr tees)
            try:
                os.sched_setaffinity(self.proc.pid, cpus)
            except OSError:  # it already ended
                pass
        if stderr_tail is not None:
            assert self.proc.stderr is not None
            stderr_tail.start(self.proc.stderr)

    def go(self) -> None:
        """Let a run started ahead go on into its program (nothing for one that was not)."""
        if self._go is not None:
            self.went_ns = time.time_ns()
            with contextlib.suppress(OSError):  # it ended already: its exit is seen as any other
                os.write(self._go, turn.GO)
            os.close(self._go)
            self._go = None

    def measured(self) -> bool:
        """Whether the program said its measured steps are done (dlscope try's runs; it ends now)."""
        return (self.profile_dir / turn.MEASURED).exists()

    def call_off(self) -> None:
        """A run started ahead that will not have its turn: it exits without running its program;
        its records closed and its profile folder removed."""
        if self._go is not None:
            os.close(self._go)
            self._go = None
        self.proc.wait()
        self.finish()
        shutil.rmtree(self.profile_dir, ignore_errors=True)

    def finish(self) -> None:
        """After the program exited: its last words, then the parent's records closed."""
        self.imported = turn.read_mark(self.profile_dir)
        for said in (turn.MEASURED, turn.MEASURED_TMP, turn.PREIMPORT):  # said to us or to it: not the profile's
            (self.profile_dir / said).unlink(missing_ok=True)
        try:
            if self._tail is not None:
                self._tail.join()  # the program's last words before anything dlscope prints
            self._run_range.__exit__(None, None, None)
        finally:
            if self._live is not None:
                self._live.stop()
            self._parent.stop("exit")


@contextlib.contextmanager
def forwarding_signals(running: Callable[[], Iterable[ProfiledRun]]) -> Iterator[Callable[[], bool]]:
    """While inside, the termination signals we get go to the programs ``running()`` names (Ctrl-C
    too, unless the terminal delivered it to them already). Yields a test: whether a Ctrl-C came."""
    forwarded = {signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT}
    interactive = _interactive()
    interrupted = False

    def forward(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = interrupted or signum == signal.SIGINT
        if signum == signal.SIGINT and interactive:
            return  # the terminal already delivered it to the programs
        for run in running():
            try:
                run.proc.send_signal(signum)
            except ProcessLookupError:
                pass

    old = {s: signal.signal(s, forward) for s in (*forwarded, signal.SIGINT)}
    try:
        yield lambda: interrupted
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def wait_all(runs: list[ProfiledRun]) -> list[int]:
    """Wait for every run's program, forwarding the termination signals we get to each; then finish
    each. Returns their raw return codes (negative: killed by that signal), in order."""
    codes: list[int] = []
    try:
        with forwarding_signals(lambda: runs):
            for run in runs:
                while True:
                    try:
                        codes.append(run.proc.wait())
                        break
                    except KeyboardInterrupt:  # pragma: no cover - SIGINT is handled above
                        continue
    finally:
        for run in runs:
            run.finish()
    return codes


def run_queues(
    queues: list[list[Callable[[bool], ProfiledRun]]],
    done: Callable[[int, int, ProfiledRun, int, int], None],
    ahead: bool = False,
    held: dict[int, list[ProfiledRun]] | None = None,
    after: Callable[[int], list[ProfiledRun]] | None = None,
) -> dict[int, list[ProfiledRun]]:
    """Each queue's runs one after another, the queues side by side: a queue starts its next run as
    soon as its last one exits, whatever the others do (one queue per GPU: a GPU whose run ended
    early does not wait for the other's). ``queues[q][j](early)`` starts run j of queue q, ahead of
    its turn when ``early`` (:mod:`.turn`: with ``ahead``, each queue's next :data:`AHEAD` runs are
    started as its current one goes on, and each is let go when the one before it has measured its
    steps (its mark) or exited).
    ``done(q, j, run, rc, exited_ns)`` hears of each as it ends (finished: its parent's records
    closed; the wall clock when its exit was seen), after the queue's next run has gone on: what
    ``done`` does with the run that ended (its profile written) overlaps the next one's start-up.
    Termination signals are forwarded to the running programs as :func:`wait_all` does; no queue
    lets another run go once one was interrupted (Ctrl-C; the runs started ahead are called off),
    the others finish what runs.

    Across calls (dlscope try's batches of rounds, a look between them), with ``ahead``: ``after(q)``
    starts ahead, once queue q's last run is started (ahead or not), the runs a later call may begin
    the queue with; those are returned, still waiting, for that call's ``held``: queue q's first runs, in its order, the
    first let go at once and the next in its turn (those beyond the queue's runs are called off)."""
    running: dict[int, tuple[int, ProfiledRun]] = {}  # each queue's run whose turn it is
    waiting: dict[int, list[tuple[int, ProfiledRun]]] = {}  # each queue's next runs, started ahead
    ending: list[tuple[int, int, ProfiledRun]] = []  # measured, their next let go, not yet exited
    kept: dict[int, list[ProfiledRun]] = {}  # each queue's runs after its last, for the next call
    held = {q: list(runs) for q, runs in (held or {}).items()}
    stopped = False

    asked_after: set[int] = set()

    def ahead_of(q: int, j: int) -> None:
        """Queue q's runs after run j started ahead, :data:`AHEAD` of them: its next ones, then (past
        its last) the next call's first (``after``)."""
        if not ahead:
            return
        queued = waiting.setdefault(q, [])
        nxt = queued[-1][0] + 1 if queued else j + 1
        while len(queued) < AHEAD and nxt < len(queues[q]):
            queued.append((nxt, held[q].pop(0) if held.get(q) else queues[q][nxt](True)))
            nxt += 1
        if nxt >= len(queues[q]) and after is not None and q not in asked_after:
            asked_after.add(q)
            kept[q] = after(q)

    def start(q: int, j: int) -> None:
        if j < len(queues[q]):
            if held.get(q):
                run = held[q].pop(0)
                run.go()
                running[q] = (j, run)
            else:
                running[q] = (j, queues[q][j](False))
            ahead_of(q, j)

    def next_of(q: int, j: int) -> None:
        """Queue q's run after run j goes on: the one waiting let go (and the one after started
        ahead), or started now."""
        if waiting.get(q):
            jn, run = waiting[q].pop(0)
            run.go()
            running[q] = (jn, run)
            ahead_of(q, jn)
        else:
            start(q, j + 1)

    def call_off_waiting() -> None:
        for _, early in [w for queued in waiting.values() for w in queued]:
            early.call_off()
        waiting.clear()
        for early in [run for runs in kept.values() for run in runs]:
            early.call_off()
        kept.clear()

    def everyone() -> list[ProfiledRun]:
        runs = [run for _, run in [*running.values(), *[w for queued in waiting.values() for w in queued]]]
        runs += [run for _, _, run in ending]
        return runs + [run for runs in kept.values() for run in runs]

    for q, runs in held.items():  # more than the queue has runs for
        extra = runs[len(queues[q]) if q < len(queues) else 0 :]
        del runs[len(runs) - len(extra) :]
        for run in extra:
            run.call_off()
    try:
        with forwarding_signals(everyone) as interrupted:
            for q in range(len(queues)):
                start(q, 0)
            while running or ending:
                for q, j, run in list(ending):
                    rc = run.proc.poll()
                    if rc is not None:
                        exited = time.time_ns()
                        ending.remove((q, j, run))
                        run.finish()
                        stopped = stopped or interrupted() or rc in (-signal.SIGINT, 130)
                        if stopped:
                            call_off_waiting()
                        done(q, j, run, rc, exited)
                for q, (j, run) in list(running.items()):
                    rc = run.proc.poll()
                    if rc is None:
                        if waiting.get(q) and not stopped and run.measured():
                            # its steps are measured: the GPU's next run goes on while it ends
                            del running[q]
                            ending.append((q, j, run))
                            next_of(q, j)
                        continue
                    exited = time.time_ns()
                    del running[q]
                    run.finish()
                    stopped = stopped or interrupted() or rc in (-signal.SIGINT, 130)
                    if stopped:
                        call_off_waiting()
                    else:
                        next_of(q, j)
                    done(q, j, run, rc, exited)
                if running or ending:
                    time.sleep(POLL_S)
    except BaseException:
        stopped = True  # the runs kept for a next call will have none
        raise
    finally:
        for _, run in running.values():  # left by an exception: not waited for, but their records closed
            run.finish()
        for _, _, run in ending:
            run.finish()
        for _, run in [w for queued in waiting.values() for w in queued]:
            run.call_off()
        for run in [run for runs in held.values() for run in runs]:  # left by an exception before their turn
            run.call_off()
        if stopped:
            call_off_waiting()
    return kept


# how often run_queues looks for a run that ended: small against a run's seconds of start-up
POLL_S = 0.05
# runs of a queue started ahead at once: two, as a run's imports (about 8 s of the BERT-like
# program's, torch and torch._dynamo, on the H200 host) outlast one run before it (1.5 s of set-up
# and 2-5 s of steps): with one, a run let go early spent 3-6 s more before its first step
# (bench/RESULTS.md, 2026-11-28)
AHEAD = 2


def run_profiled(
    cmd: list[str],
    profile_dir: Path,
    settings: Settings,
    stdout: TextIO | None = None,
    stderr_tail: StderrTail | None = None,
    placement: Placement | None = None,
) -> int:
    """Run ``cmd`` to completion under the profiler; returns its raw return code (negative:
    killed by that signal). The caller finalizes. ``stdout``: where the program's standard output
    goes (default: ours). ``stderr_tail``: tee the program's stderr through it (default: the
    program writes to ours directly). ``placement``: its GPUs and CPUs (default: the host's)."""
    return wait_all([ProfiledRun(cmd, profile_dir, settings, stdout, stderr_tail, placement)])[0]


def run_end(rc: int, tail: StderrTail | None) -> RunEnd:
    """The record of how the run ended, from Popen's return code (finalize counts the steps)."""
    return RunEnd(
        exit_code=exit_status(rc),
        signal=-rc if rc < 0 else None,
        last_stderr_line=tail.last_line() if tail is not None else "",
    )
