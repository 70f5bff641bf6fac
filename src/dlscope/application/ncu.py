"""The ncu use case: run Nsight Compute on the kernels that cost most in a profile, one kernel
per run of the user's program, and store the metrics in the profile's ``kernel_metrics`` table."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:  # loaded when ncu is run: building the command line must stay light
    import pyarrow as pa


@dataclass
class NcuOptions:
    """What to measure: the ``top`` costliest kernels of ``profile``, each while ``cmd`` runs under
    ncu (``launch_skip`` launches skipped, ``launch_count`` measured), with ncu's ``section`` set
    (default :data:`DEFAULT_SECTIONS`) and raw ``metrics`` (default :data:`DEFAULT_METRICS`, then
    :data:`ROOFLINE_METRICS`); ``ncu``: the executable (default: found on PATH); ``timeout``: per
    kernel, in seconds."""

    profile: str
    cmd: list[str]
    top: int = 5
    launch_skip: int = 1
    launch_count: int = 1
    section: list[str] | None = None
    metrics: list[str] | None = None
    ncu: str | None = None
    timeout: float = 600.0


@dataclass
class NcuStored:
    """What :func:`measure_kernels` stored: ``rows`` metric values of ``kernels`` kernels in ``path``."""

    rows: int
    kernels: int
    path: Path
    failures: list[str] = field(default_factory=list)  # kernels not measured, and why


def measure_kernels(opts: NcuOptions, say: Callable[[str], None]) -> NcuStored:
    """Measure the top kernels of ``opts.profile`` under ncu and store their metrics there.
    ``say`` hears of each kernel as its run starts, of fewer metrics measured, and of the kernels
    not measured. Raises InputError when ncu measured none."""
    import pyarrow as pa

    from ..store.amend import replace_table
    from ..store.reader import open_profile

    ncu = find_ncu(opts.ncu)
    targets = top_kernels(opts.profile, opts.top)
    tables: list[pa.Table] = []
    failures: list[str] = []
    refusals: list[str] = []
    launch_base = 0
    with tempfile.TemporaryDirectory(prefix="dlscope-ncu-") as work:
        for i, t in enumerate(targets):
            say(f"ncu {i + 1}/{len(targets)}: {t.name[:100]}")
            got = measure_one(ncu, t, opts, Path(work) / f"k{i}.csv")
            table = got.table
            if table is None:
                failures.append(f"{t.name[:60]}: {got.why}")
                continue
            if got.refused:
                refusals.append(got.refused)
                say(f"ncu: measured with fewer raw metrics; ncu refused the first set: {got.refused}")
            # the profile's own name (ncu may print it differently), launches numbered across runs
            table = table.set_column(
                table.schema.get_field_index("name"), "name", pa.array([t.name] * table.num_rows, pa.string())
            )
            launches = table.column("launch").to_pylist()
            table = table.set_column(
                table.schema.get_field_index("launch"),
                "launch",
                pa.array([launch_base + x for x in launches], pa.int32()),
            )
            launch_base += max(launches) + 1
            tables.append(table)
    for f in failures:
        say(f"ncu: {f}")
    if not tables:
        raise InputError(f"ncu measured none of the {len(targets)} kernels ({failures[0] if failures else ''})")
    prof = open_profile(opts.profile)
    if refusals:  # kept for kernel_metrics' note: why a roofline may be missing
        from ..analysis.reports.kernel_metrics import NCU_REFUSED_NOTE

        prof.meta.note(f"{NCU_REFUSED_NOTE}{refusals[0]}")
    rows = replace_table(prof.path, prof.meta, "kernel_metrics", pa.concat_tables(tables))
    return NcuStored(rows, len(tables), prof.path, failures)


# Sections for the verdicts dlscope draws (throughput, occupancy, launch shape), and
# raw metrics for the roofline position and the tensor pipe. Regexes: the tensor pipe's metric
# name differs between GPU generations, and a metric a GPU lacks must not fail the run.
DEFAULT_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats")
DEFAULT_METRICS = (
    "dram__bytes.sum",
    r"regex:^sm__sass_thread_inst_executed_op_[dfh](add|mul|fma)_pred_on\.sum$",
    r"regex:^sm__pipe_tensor.*cycles_active\.avg\.pct_of_peak_sustained_active$",
)
# When ncu refuses those (on an H100 with ncu 2025.3 the whole set was dropped and no roofline
# came back), the roofline's own counters by their plain names: the ones Nsight Compute's
# Speed-Of-Light roofline reads (Kernel Profiling Guide, "Roofline Charts").
ROOFLINE_METRICS = ("dram__bytes.sum",) + tuple(
    f"sm__sass_thread_inst_executed_op_{p}{op}_pred_on.sum" for p in "dfh" for op in ("add", "mul", "fma")
)
# ncu's line when the kernel filter matched nothing (then the name, not the metrics, is at fault)
NO_KERNELS = "No kernels were profiled"
_REGEX_SPECIAL = set(".^$*+?()[]{}|\\")


def regex_escape(name: str) -> str:
    """``name`` as a literal in ncu's (ECMAScript) regex: only the special characters escaped
    (Python's re.escape also escapes spaces and '<', which std::regex may refuse)."""
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in name)


@dataclass
class Target:
    name: str
    total_ns: int
    launches: int


def top_kernels(profile: str, n: int) -> list[Target]:
    """The ``n`` kernels of ``profile`` with the most GPU time, most first."""
    from .open import open_for_analysis

    data = open_for_analysis(profile)
    if not data.has("kernels"):
        raise InputError(f"{profile}: the profile has no kernels to choose from")
    rows = data.con.execute(f"""SELECT name, sum(end_ns - start_ns)::BIGINT AS ns, count(*) FROM kernels
                                GROUP BY name ORDER BY ns DESC, name LIMIT {int(n)}""").fetchall()
    return [Target(str(r[0]), int(r[1]), int(r[2])) for r in rows]


def find_ncu(explicit: str | None) -> str:
    for cand in (explicit, os.environ.get("DLSCOPE_NCU"), shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return cand
    if explicit:
        raise InputError(f"{explicit}: no such ncu executable")
    raise InputError(
        "Nsight Compute (ncu) is not installed or not on PATH (install it with the CUDA toolkit, or give --ncu PATH)"
    )


def mangled_function_name(name: str) -> str | None:
    """The bare function name inside an Itanium-mangled name (what CUPTI reports for cuBLAS's and
    CUB's kernels): '_ZN7cutlass7Kernel2I43cutlass_80_simt...EEvNT_6ParamsE' -> 'Kernel2',
    '_Z20generate_seed_pseudoI...' -> 'generate_seed_pseudo'; None where it is not that simple
    (operators, constructors, substitutions before the name)."""
    if not name.startswith("_Z"):
        return None
    i, last = 2, None
    i += name.startswith("L", i)  # internal linkage
    nested = name.startswith("N", i)
    i += nested
    while i < len(name):
        while nested and i < len(name) and name[i] in "KVrRO":  # qualifiers of a nested member
            i += 1
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j == i:
            break
        n = int(name[i:j])
        last, i = name[j : j + n], j + n
        if not nested or not name[i : i + 1].isdigit():
            break
    return last or None


def function_name(name: str) -> str:
    """The bare function name of a kernel name: 'void ns::k<4, T>(int, T)' -> 'k'; a mangled name's
    through :func:`mangled_function_name`."""
    bare = mangled_function_name(name)
    if bare:
        return bare
    # '(anonymous namespace)' is a scope, not the argument list: PyTorch's layer norm kernel is
    # 'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, ...)'
    head = name.removeprefix("void ").replace("(anonymous namespace)", "anonymous_namespace").split("(", 1)[0]
    depth, out = 0, []
    for c in head:  # drop template arguments, which may nest and hold '::'
        depth += c == "<"
        if depth == 0:
            out.append(c)
        depth -= c == ">"
    return "".join(out).strip().split("::")[-1].split(" ")[-1]


def ncu_command(
    ncu: str,
    target: Target,
    opts: NcuOptions,
    log: Path,
    by_function: bool = False,
    metrics: tuple[str, ...] | None = None,
) -> list[str]:
    """ncu's command line for one kernel. ``by_function``: match the bare function name (ncu and
    the profiler demangle some names differently); ``metrics``: the raw metrics to add (default:
    ``--metrics`` or :data:`DEFAULT_METRICS`)."""
    if by_function:
        base, pattern = "function", function_name(target.name)
    else:
        base, pattern = ("mangled" if target.name.startswith("_Z") else "demangled"), target.name
    skip = min(opts.launch_skip, max(target.launches - opts.launch_count, 0))
    cmd = [
        ncu,
        "--csv",
        "--page",
        "details",
        "--print-units",
        "base",
        "--log-file",
        str(log),
        "--target-processes",
        "all",
        "--kernel-name-base",
        base,
        "--kernel-name",
        f"regex:^{regex_escape(pattern)}$",
        "--launch-skip",
        str(skip),
        "--launch-count",
        str(opts.launch_count),
    ]
    for s in opts.section or DEFAULT_SECTIONS:
        cmd += ["--section", s]
    wanted = metric_tiers(opts)[0] if metrics is None else metrics
    if wanted:  # once, comma-separated: ncu 2025.3 on the H100 refused a second --metrics outright
        cmd += ["--metrics", ",".join(wanted)]
    return cmd + list(opts.cmd)  # ncu [options] app [args]: no '--' separator


def metric_tiers(opts: NcuOptions) -> list[tuple[str, ...]]:
    """The raw metric sets to try, best first; the last asks for none."""
    if opts.metrics:
        return [tuple(opts.metrics), ()]
    return [DEFAULT_METRICS, ROOFLINE_METRICS, ()]


@dataclass
class Measured:
    """One kernel's ncu run: its metrics (None: not measured), why not, and, when ncu refused the
    raw metrics asked for first, its words (the metrics then measured are a smaller set)."""

    table: pa.Table | None
    why: str = ""
    refused: str = ""


def measure_one(ncu: str, target: Target, opts: NcuOptions, log: Path) -> Measured:
    """Run ncu on one kernel. When ncu profiles nothing (it spells the name differently), the next
    try matches the bare function name; when it refuses a raw metric (a GPU that lacks it, a regex
    it does not take), the next asks for fewer (:func:`metric_tiers`)."""
    # On the H100 ncu 2025.3 spelled kernels its own way ('void vectorized_elementwise_kernel<4, FillFunctor<float>,
    # array<char *, 1>>(int, T2, T3)' for PyTorch's 'void at::native::vectorized_elementwise_kernel<4, ...'), so a
    # full-name filter can match nothing: the bare function name is the second try.
    from ..importers.ncu import parse_ncu_csv, read_ncu_file

    tiers = metric_tiers(opts)
    tier, by_function = 0, False
    why = refused = ""
    while True:
        log.unlink(missing_ok=True)
        try:
            # ncu prints its ==ERROR== lines on stdout
            proc = subprocess.run(
                ncu_command(ncu, target, opts, log, by_function, tiers[tier]),
                capture_output=True,
                text=True,
                timeout=opts.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return Measured(None, f"timed out after {opts.timeout:.0f} s")
        text = read_ncu_file(log) if log.exists() else ""
        try:
            return Measured(parse_ncu_csv(text, log), "", refused)
        except InputError:
            output = text + "\n" + (proc.stdout or "") + "\n" + (proc.stderr or "")
            lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith("==PROF==")]
            errors = [ln for ln in lines if "ERROR" in ln]
            why = (errors[0] if errors else lines[-1] if lines else f"exit code {proc.returncode}")[:200]
        if NO_KERNELS in output and not by_function:
            by_function = True
        elif tier + 1 < len(tiers) and NO_KERNELS not in output:
            tier += 1
            refused = refused or why
        else:
            return Measured(None, why)
