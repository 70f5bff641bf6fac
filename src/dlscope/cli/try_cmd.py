"""Measure what each advised fix saves: run the program unchanged and with each fix, alternated."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .base import Command

if TYPE_CHECKING:
    from ..analysis.compare.tries import FixOutcome, Run

DEFAULT_STEPS = 20
DEFAULT_REPEAT = 3
# Steps every run leaves out before measuring: the baseline's first run traces steps 1-5 after
# its warm-up step (the default mode's window), and the others skip as many, so that every run is
# measured over the same steps of the program.
WARMUP_STEPS = 6


class TryCommand(Command):
    """Measure what each advised fix saves: run the program unchanged and with each fix, alternated.

    dlscope try [--fixes auto|NAME,...] [--steps N] [--repeat R] [-o DIR] -- CMD [ARGS...]
    The first run is profiled (default mode) and advised; 'auto' tries the fixes whose rules fired.
    Every fix is applied without changing the program's source (dlscope's bootstrap), each run is
    stopped after the warm-up and N measured steps, and the runs alternate R times. Prints the
    measured saving of the median step with its interval and test next to the advice's prediction,
    then the fixes that helped, applied together. Profiles of every run go under DIR.
    """

    without_pandas = False  # runs the user's program
    name = "try"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--fixes", default="auto", metavar="auto|NAME,...",
                            help="fixes to try (default auto: those the advice names on the first run)")
        parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                            help=f"measured steps per run, after {WARMUP_STEPS} warm-up steps (default {DEFAULT_STEPS})")
        parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT, metavar="R",
                            help=f"alternations of the unchanged and fixed runs (default {DEFAULT_REPEAT})")
        parser.add_argument("-o", "--output", metavar="DIR", help="folder for the runs' profiles (default SCRIPT.try)")
        parser.add_argument("-f", "--force", action="store_true", help="overwrite an existing folder")
        parser.add_argument("--no-combined", action="store_true", help="do not measure the helpful fixes together")
        parser.add_argument("--format", choices=("text", "json"), default="text")
        parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")

    def run(self, args: argparse.Namespace) -> int:
        from ..capture.fixes import BY_NAME
        from ..capture.launcher import command_after_dashes

        cmd = command_after_dashes(list(args.command))
        if args.steps < 3:
            raise UsageError("--steps must be at least 3 (a median of fewer steps says little)")
        if args.repeat < 1:
            raise UsageError("--repeat must be at least 1")
        asked = [f.strip() for f in args.fixes.split(",") if f.strip()]
        unknown = [f for f in asked if f != "auto" and f not in BY_NAME]
        if unknown:
            raise UsageError(f"unknown fix {unknown[0]!r} (known: auto, {', '.join(BY_NAME)})")
        out = Path(args.output) if args.output else Path(f"{_stem(cmd)}.try")
        if out.exists():
            if not args.force:
                raise UsageError(f"{out} exists (use -f to overwrite, or -o to choose another folder)")
            import shutil

            shutil.rmtree(out)
        out.mkdir(parents=True)
        result = Trial(cmd, out, args.steps, args.repeat, asked, not args.no_combined,
                       quiet=args.format == "json").run()
        if args.format == "json":
            print(json.dumps(result, indent=1, default=str))
        return 130 if result["interrupted"] else 0  # the shell's code for Ctrl-C


def _stem(cmd: list[str]) -> str:
    script = next((a for a in cmd if a.endswith(".py")), Path(cmd[0]).name)
    return Path(script).stem or "program"


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

    def __init__(self, cmd: list[str], out: Path, steps: int, repeat: int, asked: list[str], combined: bool,
                 quiet: bool = False) -> None:
        self.cmd, self.out, self.steps, self.repeat = cmd, out, steps, repeat
        self.asked, self.combined, self.quiet = asked, combined, quiet
        self.runs: list[Run] = []
        self.interrupted = False
        self.fix_options: dict[str, dict[str, Any]] = {}  # per fix: the advice's predicted saving

    def say(self, msg: str) -> None:
        if not self.quiet:
            print(f"dlscope try: {msg}", file=sys.stderr, flush=True)

    def run(self) -> dict[str, Any]:
        from ..analysis.compare.tries import measure, run_spread_pct
        from ..capture.fixes import BY_NAME, FIXES

        first = self._run("baseline", 0, [], traced=True)
        predicted, fired = self._advice(first)
        # a fix with a size (DataLoader workers) is sized to the saving the advice predicted for it
        self.fix_options = {n: {"predicted_saving_pct": _predicted(predicted, f.rules)} for n, f in BY_NAME.items()}
        if "auto" in self.asked:
            names = [f.name for f in FIXES if not f.on_request_only and set(f.rules) & set(fired)]
            names += [n for n in self.asked if n != "auto" and n not in names]
        else:
            names = list(self.asked)
        self.say(f"fixes to try: {', '.join(names) or 'none (no finding has a fix dlscope can apply)'}")
        for rnd in range(self.repeat):
            order = ["baseline", *names] if rnd else names
            order = order[rnd % len(order):] + order[: rnd % len(order)] if order else order
            for label in order:
                if self.interrupted:
                    break
                self._run(label, rnd, [] if label == "baseline" else [label])
        base = [r for r in self.runs if r.label == "baseline"]
        outcomes = [measure(n, list(BY_NAME[n].rules), base, [r for r in self.runs if r.label == n],
                            _predicted(predicted, BY_NAME[n].rules), BY_NAME[n].changes_precision) for n in names]
        helped = [o.name for o in outcomes if o.applied and o.significant and (o.measured_saving_pct or 0) > 0
                  and not o.loss_diverged]
        together = None
        if self.combined and len(helped) > 1 and not self.interrupted:
            for rnd in range(self.repeat):
                for label in (["baseline", "combined"] if rnd % 2 else ["combined", "baseline"]):
                    if not self.interrupted:
                        self._run(label, self.repeat + rnd, [] if label == "baseline" else helped)
            base = [r for r in self.runs if r.label == "baseline"]
            together = measure("combined", [], base, [r for r in self.runs if r.label == "combined"],
                               None, any(BY_NAME[n].changes_precision for n in helped))
            together.reason = "+".join(helped)
            together.agrees = None  # no prediction for the fixes together
        if self.interrupted:
            self.say("interrupted: the runs so far are measured; the rest did not run")
        self._store(first, outcomes)
        spread = run_spread_pct([r for r in self.runs if r.label == "baseline"])
        result = {"command": self.cmd, "steps": self.steps, "repeat": self.repeat, "interrupted": self.interrupted,
                  "baseline_spread_pct": spread,
                  "profiles": str(self.out), "fixes": [o.as_dict() for o in outcomes],
                  "combined": together.as_dict() if together else None,
                  "runs": [{"label": r.label, "round": r.round, "exit_code": r.exit_code, "median_ms": r.median_ms,
                            "steps": len(r.steps_ms), "profile": r.profile} for r in self.runs]}
        if not self.quiet:
            from ..render.terminal import console
            from ..render.tries import render_tries

            render_tries(outcomes, together, console(), self.interrupted, spread)
        return result

    # ---- one run ------------------------------------------------------------------------------
    def _run(self, label: str, rnd: int, fixes: list[str], traced: bool = False) -> Run:
        from ..analysis.compare.tries import Run
        from ..capture.base import Settings
        from ..capture.finalize import finalize_profile
        from ..capture.launcher import StderrTail, exit_status, run_end, run_profiled

        path = self.out / f"{label}.{rnd}.dlscope"
        last = WARMUP_STEPS + self.steps
        extra = {"fixes": fixes, "stop_after_step": last, "record_loss": True,
                 "fix_options": {n: self.fix_options.get(n, {}) for n in fixes}}
        settings = (Settings(extra=extra) if traced else
                    Settings(warmup=WARMUP_STEPS, detail_steps=0, extra=extra))
        self.say(f"run {len(self.runs) + 1}: {label}{' (profiled)' if traced else ''}, round {rnd + 1}")
        # with --format json our stdout is the result: the program's own output goes to stderr
        tail = StderrTail()
        rc = run_profiled(self.cmd, path, settings, stdout=_stderr_file() if self.quiet else None, stderr_tail=tail)
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
        run = _read_run(path, label, rnd, status)
        self.runs.append(run)
        return run

    def _advice(self, first: Run) -> tuple[dict[str, float], list[str]]:
        """The first run's findings: saving per rule (%), and the rules that fired."""
        from .. import advice
        from ..analysis.context import ProfileData

        if not first.profile or not Path(first.profile, "meta.json").exists():
            return {}, []
        found = advice.evaluate(ProfileData.open(first.profile))
        return ({f.id: f.saving_pct for f in found if f.saving_pct is not None},
                [f.id for f in found if not f.negligible and (f.saving_pct or 0) > 0])

    def _store(self, first: Run, outcomes: list[FixOutcome]) -> None:
        """The outcomes as the ``tries`` table of the first run's profile."""
        if not first.profile or not outcomes or not Path(first.profile, "meta.json").exists():
            return
        import pyarrow as pa

        from ..store.amend import replace_table
        from ..store.meta import load_meta

        rows = {
            "fix": [o.name for o in outcomes], "rules": [",".join(o.rules) for o in outcomes],
            "applied": [o.applied for o in outcomes], "reason": [o.reason or None for o in outcomes],
            "changes_precision": [o.changes_precision for o in outcomes],
            "predicted_saving_pct": [o.predicted_saving_pct for o in outcomes],
            "measured_saving_pct": [o.measured_saving_pct for o in outcomes],
            "measured_low_pct": [o.measured_interval_pct[0] if o.measured_interval_pct else None for o in outcomes],
            "measured_high_pct": [o.measured_interval_pct[1] if o.measured_interval_pct else None for o in outcomes],
            "p_value": [o.p_value for o in outcomes], "significant": [o.significant for o in outcomes],
            "agrees": [o.agrees for o in outcomes], "loss_diverged": [o.loss_diverged for o in outcomes],
            "baseline_ms": [o.baseline_ms for o in outcomes], "fixed_ms": [o.fixed_ms for o in outcomes],
            "runs": [o.runs for o in outcomes], "steps": [o.steps for o in outcomes],
        }
        path = Path(first.profile)
        replace_table(path, load_meta(path / "meta.json"), "tries", pa.table(rows))


def _predicted(predicted: dict[str, float], rules: tuple[str, ...]) -> float | None:
    got = [predicted[r] for r in rules if r in predicted]
    return max(got) if got else None


def _read_run(path: Path, label: str, rnd: int, status: int) -> Run:
    """A finished run: its measured steps (untraced, after the warm-up; rank 0), losses and fixes."""
    from ..analysis.compare.tries import Run
    from ..analysis.context import ProfileData

    data = ProfileData.open(path)
    steps = [r[0] for r in data.con.execute(
        "SELECT (end_ns - start_ns) / 1e6 FROM stat_steps WHERE rank = (SELECT min(rank) FROM stat_steps) "
        "ORDER BY step").fetchall()]
    st = data.meta.collectors.get("fixes")
    settings = st.settings if st is not None else {}
    first_measured = WARMUP_STEPS
    losses = [float(v) for s, v in settings.get("losses") or [] if s >= first_measured and isinstance(v, (int, float))]
    bad = [v for s, v in settings.get("losses") or [] if s >= first_measured and not isinstance(v, (int, float))]
    losses += [float(v) for v in bad]  # 'nan' / 'inf' as floats: the numerics check flags them
    return Run(label, rnd, status, steps, losses, settings.get("fixes") or {}, str(path))
