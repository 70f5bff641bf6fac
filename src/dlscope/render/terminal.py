"""The terminal summary (rich). Only formats: every number comes from analysis.summary."""

from __future__ import annotations

import shlex
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.core.headline import Headline
from ..analysis.core.job_end import JobEnd
from ..analysis.core.summary import Summary
from ..vocabulary.names import StepSource


def console(stderr: bool = False) -> Console:
    """A console that is plain (no colour, no progress) when not writing to a terminal."""
    c = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not c.is_terminal:
        c = Console(stderr=stderr, highlight=False, soft_wrap=False, width=140, color_system=None)
    return c


def _ms(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def batch_note(size: int | None, source: str | None) -> str:
    """'' or ' (batch 64, from DataLoader.batch_size)' (the source as meta.json records it)."""
    if not size:
        return ""
    if not source:
        return f" (batch {size})"
    return f" (batch {size}, as given)" if source == "given" else f" (batch {size}, from {source})"


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    runs: list[list[int]] = []
    for x in steps:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def warmup_excluded_text(steps: list[int]) -> str:
    """'warm-up excluded: 1 step (step 0)': the count first, so that step 0 never reads as none."""
    n = len(steps)
    return f"warm-up excluded: {n} step{'s' if n > 1 else ''} (step{'s' if n > 1 else ''} {_ranges(steps)})"


def _device_lines(devices: list[dict[str, Any]]) -> list[str]:
    """One line per kind of GPU: 'devices 0-3: 4 x NAME (132 SMs)', or 'device 0: NAME'."""
    groups: dict[tuple[Any, Any], list[Any]] = {}
    for d in devices:
        groups.setdefault((d.get("name", "?"), d.get("sms")), []).append(d.get("index", "?"))
    lines = []
    for (name, sms), idx in groups.items():
        extra = f" ({sms} SMs)" if sms else ""
        if len(idx) == 1:
            lines.append(f"  device {idx[0]}: {name}{extra}")
        else:
            nums = sorted(i for i in idx if isinstance(i, int))
            span = _ranges(nums) if len(nums) == len(idx) else ", ".join(map(str, idx))
            lines.append(f"  devices {span}: {len(idx)} x {name}{extra}")
    return lines


def render_job_end(end: JobEnd, out: Console) -> None:
    """The abnormal end of a job: the line, then how each rank ended (the first to end first)."""
    out.print(f"  [bold]{escape(end.line)}[/bold]")
    for line in end.rank_lines():
        out.print(f"    {escape(line)}")
    if end.excluded_steps:
        out.print(
            f"    left out: step{'s' if len(end.excluded_steps) > 1 else ''} {_ranges(end.excluded_steps)}, "
            "not completed by every rank"
        )


def render_summary(s: Summary, out: Console) -> None:
    out.print(f"[bold]dlscope summary[/bold]  {s.profile}")
    if s.failure is not None:  # first, and alone: steps, phases and layers would only mislead
        out.print(f"  [bold]{escape(s.failure)}[/bold]")
    if s.command:
        out.print(f"  command: {shlex.join(s.command)}")
    line = f"  source: {s.source}   wall time: {_ms(s.wall_ms / 1000, 3)} s"
    if s.exit_code is not None:
        line += f"   exit code: {s.exit_code}"
    out.print(line)
    for line in _device_lines(s.devices):
        out.print(line)
    if s.job_end is not None and s.failure is None:
        render_job_end(s.job_end, out)
    if s.failure is not None:
        for note in s.notes:
            out.print(f"  note: {note}")
        return
    st = s.steps
    out.print()
    if st.count:
        head = f"[bold]Steps[/bold]  {st.count} measured"
        if st.ranks > 1:  # one job step is a step of every rank: say both
            head = (
                f"[bold]Steps[/bold]  {st.steps_per_rank} measured on each of {st.ranks} ranks "
                f"({st.count} rank-steps; statistics over all of them)"
                if st.count == st.steps_per_rank * st.ranks
                else f"[bold]Steps[/bold]  {st.steps_per_rank} measured, {st.count} rank-steps on {st.ranks} ranks"
            )
        if st.first_step is not None:
            head += f" (steps {st.first_step}-{st.last_step})"
        if st.warmup_excluded:
            head += f"; {warmup_excluded_text(st.warmup_excluded)}"
        if s.selection:
            head += f"; selection: {s.selection}"
        out.print(head)
        if st.source == StepSource.JIT_EXECUTABLE:  # derived, not marked by the program: said where steps are read
            out.print(
                "  steps: the runs of the program's repeated jit executable (it annotated none; the notes name it)"
            )
        if st.traced_excluded:
            tr = st.traced_excluded
            out.print(
                f"  timed without tracing overhead: steps {_ranges(tr)} ran with detailed tracing "
                "(ops, kernels) and are left out of these statistics"
            )
        t = Table(show_edge=False, header_style="bold", pad_edge=False)
        for col in ("mean ms", "p50 ms", "p95 ms", "p99 ms", "std ms", "steps/s", "samples/s"):
            t.add_column(col, justify="right")
        t.add_row(
            _ms(st.mean_ms, 3),
            _ms(st.p50_ms, 3),
            _ms(st.p95_ms, 3),
            _ms(st.p99_ms, 3),
            _ms(st.std_ms, 3),
            _ms(st.steps_per_s, 2),
            _ms(st.samples_per_s, 1) if st.samples_per_s else "- (batch size unknown)",
        )
        out.print(t)
        # diff, report and check use the same definition; the batch size says where it came from
        out.print(f"  {st.throughput_basis}{batch_note(st.batch_size, st.batch_size_source)}")
    elif st.total_steps:
        out.print(f"[bold]Steps[/bold]  {st.total_steps} recorded, none selected ({s.selection or 'all warm-up'})")
    else:
        out.print(
            "[bold]Steps[/bold]  none found: call prof.step() once per iteration, or name an "
            "iteration marker with --key-node"
        )
    if s.headline:
        out.print()
        render_headline(s.headline, out)
    if s.phases:
        out.print()
        basis = "% of step time" if st.count else "% of wall time"
        out.print(f"[bold]Phases[/bold]  ({basis})")
        gpu = any(p.gpu_ms is not None for p in s.phases)
        per = "/step" if st.count else ""
        t = Table(show_edge=False, header_style="bold", pad_edge=False)
        cols: list[tuple[str, Literal["left", "right"]]] = [
            ("phase", "left"),
            ("count", "right"),
            ("total ms", "right"),
            (f"mean ms{per}", "right"),
            ("%", "right"),
        ]
        if gpu:
            cols += [(f"GPU ms{per}", "right"), (f"kernels{per}", "right")]
        span = any(p.gpu_span_ms is not None for p in s.phases)
        if span:
            cols += [(f"GPU span ms{per}", "right")]
        for col, j in cols:
            t.add_column(col, justify=j)
        for p in s.phases:
            row = [
                "  " * p.depth + p.name + (" *" if p.basis == "traced" else ""),
                f"{p.count:,}",
                _ms(p.total_ms),
                _ms(p.mean_ms, 3),
                "-" if p.pct_of_step is None else f"{p.pct_of_step:.1f}",
            ]
            if gpu:
                row += [_ms(p.gpu_ms, 3), "-" if p.kernels is None else f"{p.kernels:,.0f}"]
            if span:
                row += ["-" if p.gpu_span_ms is None else _ms(p.gpu_span_ms, 3)]
            t.add_row(*row)
        out.print(t)
        if any(p.basis == "traced" for p in s.phases):
            out.print(
                "  * found only in the traced steps (derived from the PyTorch trace): measured over those, "
                "which ran slower"
            )
        if gpu and st.traced_excluded:
            out.print(
                "  GPU columns: per traced step (GPU activity is recorded while tracing)"
                + ("; GPU span: every measured step, from CUDA events at the phase's start and end" if span else "")
            )
    _render_gpu(s, out)
    out.print()
    out.print("[bold]Layers[/bold]")
    for name, ls in s.layers.items():
        if ls.available:
            out.print(f"  {name:<12} yes ({ls.rows:,} rows)")
        else:
            out.print(f"  {name:<12} no: {ls.reason}")
    shown = " ".join(ls.reason for ls in s.layers.values() if not ls.available)
    for line in s.unavailable:
        if line not in shown:  # a missing layer's line above already gave this reason
            out.print(f"  unavailable: {line}")
    for note in s.notes:
        out.print(f"  note: {note}")


def _render_gpu(s: Summary, out: Console) -> None:
    """One line per GPU with the headline counters (hardware layer)."""
    if not s.gpu:
        return
    out.print()
    out.print(f"[bold]GPU counters[/bold]  (mean over the {s.gpu[0].get('basis', 'selected steps')})")
    labels = (
        ("gpu_util", "util", "%"),
        ("sm_active", "SM active", "%"),
        ("tensor_active", "tensor active", "%"),
        ("dram_bw_util", "DRAM bw", "%"),
        ("power", "power", " W"),
    )
    for g in s.gpu:
        parts = [f"{label} {g[k]:.0f}{unit}" for k, label, unit in labels if g.get(k) is not None]
        if g.get("mem_used") is not None:
            parts.append(f"memory used max {g['mem_used'] / 2**30:.1f} GiB")
        out.print(f"  GPU {g['device']}{' ' + g['name'] if g.get('name') else ''}: " + " | ".join(parts))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}%"


def render_headline(h: Headline, out: Console) -> None:
    over = (
        f"over {h.steps} step{'s' if h.steps != 1 else ''} with GPU data"
        if h.steps is not None
        else "over the whole profile"
    )
    out.print(f"[bold]Headline[/bold]  {over} ({_ms(h.wall_ms, 3)} ms)")
    out.print(
        f"  GPU utilization {_pct(h.gpu_util_pct)}   tensor-core kernels {_pct(h.tensor_core_pct)} of kernel time"
    )
    out.print(
        f"  time: kernels {_pct(h.kernels_pct)}  memory ops {_pct(h.memory_pct)}  "
        f"data loading {_pct(h.data_loading_pct)}  CPU only {_pct(h.cpu_only_pct)}  other {_pct(h.other_pct)}"
    )
