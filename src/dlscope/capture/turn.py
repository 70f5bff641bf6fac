"""A run started ahead of its turn: ``dlscope try`` starts a GPU's next run while the last one still
runs, and lets it go on when that one has ended.

Most of a run's start-up is imports: on an H200 host the BERT-like program of issue 38 spent 3.2-4.4 s
importing torch and 4.0-4.5 s more in its first ``AdamW(...)``, which imports ``torch._dynamo`` (about
800 modules, sympy's among them), against 0.6 s for its model, CUDA context and first step together
and 2.6 s of measured steps (bench/startup_probe.py; bench/RESULTS.md, 2026-11-28). A process started
ahead imports the frameworks the same program recorded (:data:`PREIMPORTED`) and the modules of those
frameworks' packages it had imported in an earlier run (:func:`imported_modules`, which each run writes
into its mark as its measured steps end; :func:`ahead_imports` says which): the same work the program
does, done earlier, under dlscope's hooks as the program's own import would be. Then it waits on a
pipe. Nothing touches the GPU until it is let go, so the run that still measures its steps on that GPU
shares it with nobody; the one thing the two share is the host, for the imports' seconds on one of the
GPU's CPUs.

A mark names only modules of the interpreter's library and of installed packages, never the
program's own (importing those would run its code before its turn), nor dlscope's.

Only the process dlscope started waits (its parent is dlscope), and the variable is taken out of
its environment, so that its own children (DataLoader workers, spawned ranks) never do. The pipe
closed without a word (the run was called off, or dlscope ended): the process exits at once,
having run nothing of the program."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import site
import sys
import sysconfig
from pathlib import Path

ENV = "DLSCOPE_TURN"
GO = b"g"
# a run's mark in its profile folder once its measured steps are done (it ends then): the GPU's next
# run may go on while it tears down (its CUDA context, its writes), which takes about 0.9 s on the
# H200 host against 4 s or more before the next run's first step (bench/RESULTS.md, 2026-11-28)
MEASURED = "measured"
MEASURED_TMP = ".measured.tmp"  # the mark while it is written (renamed whole)
# the frameworks whose import makes up most of a deep-learning program's start-up, as named in a
# profile's meta.frameworks: a run started ahead imports those its first run recorded
PREIMPORTED = ("torch", "jax", "tensorflow")


# the modules a run started ahead imports, one name a line: a file beside its profile, not the
# variable itself (a large program's list runs past the 128 KiB one variable may hold)
PREIMPORT = ".preimport"


def turn_env(read_fd: int, preimport_file: Path) -> str:
    """The value of :data:`ENV` for a child that waits on ``read_fd`` (ours: its parent's pid) after
    importing the modules ``preimport_file`` names."""
    return json.dumps({"fd": read_fd, "parent": os.getpid(), "preimport_file": str(preimport_file)})


def write_preimport(profile_dir: Path, names: tuple[str, ...]) -> Path:
    """The file of the modules a run started ahead imports (in its profile folder; removed as it ends)."""
    profile_dir.mkdir(parents=True, exist_ok=True)
    path = profile_dir / PREIMPORT
    path.write_text("".join(f"{n}\n" for n in names))
    return path


def _library_roots() -> tuple[str, ...]:
    """The folders of the interpreter's library and of installed packages, each ending in a separator."""
    paths = sysconfig.get_paths()
    roots = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    with contextlib.suppress(AttributeError):  # site of a virtual environment made by old tools
        roots += [*site.getsitepackages(), site.getusersitepackages()]
    return tuple({os.path.join(os.path.realpath(r), "") for r in roots if r})


def imported_modules() -> list[str]:
    """The modules this process has imported from the interpreter's library and installed packages,
    in the order they were imported: what a later run of the same program imports ahead of its turn.
    The program's own modules (outside those folders) and dlscope's are left out."""
    roots = _library_roots()
    in_library: dict[str, bool] = {}  # per folder (a few hundred for a few thousand modules)
    names = []
    for name, module in list(sys.modules.items()):
        if name in ("__main__", "__mp_main__") or name.partition(".")[0] == "dlscope":
            continue
        try:  # a lazy module's attribute may import it: only a plain file path counts
            file = module.__dict__.get("__file__")
        except Exception:  # noqa: BLE001 - a module object of a kind we cannot read: not imported ahead
            continue
        if not isinstance(file, str):
            continue
        folder = os.path.dirname(file)
        if folder not in in_library:
            in_library[folder] = os.path.join(os.path.realpath(folder), "").startswith(roots)
        if in_library[folder]:
            names.append(name)
    return names


def ahead_imports(frameworks: tuple[str, ...], imported: tuple[str, ...]) -> tuple[str, ...]:
    """What a run started ahead imports: the ``frameworks`` (:data:`PREIMPORTED` that a run recorded)
    and, of the modules an earlier run had ``imported``, those of these frameworks' packages (with what
    they import: ``torch._dynamo`` brings sympy). Not the program's other libraries: some read the
    environment as they are imported (huggingface_hub's offline switch, a cache folder), which a
    program may set in its own code first; a framework's own import comes first in a program anyway."""
    tops = {f.partition(".")[0] for f in frameworks}
    return tuple(dict.fromkeys([*frameworks, *(n for n in imported if n.partition(".")[0] in tops)]))


def mark_measured(profile_dir: Path) -> None:
    """In the run, as its measured steps are done: say so to dlscope try (a file, :data:`MEASURED`),
    naming the modules imported so far (:func:`imported_modules`), for its next runs to import ahead."""
    with contextlib.suppress(OSError):  # no mark: its next run waits for its exit, as before
        tmp = profile_dir / MEASURED_TMP
        tmp.write_text("".join(f"{n}\n" for n in imported_modules()))
        os.replace(tmp, profile_dir / MEASURED)  # whole when seen: dlscope looks for it while it is written


def read_mark(profile_dir: Path) -> tuple[str, ...]:
    """The modules a run's mark names (none: no mark, or an older run's empty one)."""
    try:
        return tuple(n for n in (profile_dir / MEASURED).read_text().splitlines() if n)
    except OSError:
        return ()


def wait_for_turn() -> None:
    """In the started process, before its program runs: import ahead, then wait to be let go."""
    spec = os.environ.pop(ENV, None)
    if not spec:
        return
    cfg = json.loads(spec)
    if os.getppid() != cfg.get("parent"):
        return  # a process the program started: not the one dlscope holds
    try:
        names = Path(cfg["preimport_file"]).read_text().splitlines()
    except (KeyError, OSError):
        names = []
    for name in names:
        try:
            importlib.import_module(name)
        except (Exception, SystemExit):  # noqa: BLE001 - the program's own import will say what is wrong
            pass
    fd = int(cfg["fd"])
    try:
        word = os.read(fd, 1)
    except OSError:
        word = b""
    finally:
        os.close(fd)
    if word != GO:
        os._exit(0)  # called off before its turn: nothing of the program ran
