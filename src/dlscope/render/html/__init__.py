"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network) that can
be mailed, attached to an issue or opened years later.

The page forbids every script and every external load with its Content-Security-Policy, so even
a name that slipped through escaping could not run; every profile-derived string is escaped
anyway (:func:`svg.esc`). Numbers come from ``analysis``; this package only lays them out.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from ...analysis import gpu_metrics
from ...analysis.context import ProfileData
from ...analysis.step_phases import step_durations, step_phases
from ...analysis.summary import summarize
from ...analysis.tensor_cores import tensor_core_share
from ...analysis.timeseries import counters_binned, gpu_busy, phase_bands, time_bins
from ...analysis.top import top_kernels, top_ops
from ...analysis.window import detail_step_count
from ...vocabulary.version import __version__
from ..progress import ProgressCallback
from . import details, plots
from .svg import esc

__all__ = ["load_findings", "render_report", "write_report"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
SECTIONS = (("summary", "Summary"), ("advice", "Advice"), ("steps", "Steps"), ("phases", "Phases"),
            ("gpu", "GPU over time"), ("kernels", "Kernels"), ("ops", "Ops"), ("capture", "Capture"))


def load_findings(data: ProfileData) -> list[Any]:
    """The advice findings for ``data``. Errors inside the rules are bugs and propagate."""
    from ... import advice

    return list(advice.evaluate(data))


def render_report(data: ProfileData, progress: ProgressCallback | None = None) -> str:
    step = progress or (lambda what, frac: None)
    step("report: summary", 0.0)
    s = summarize(data)
    tc = tensor_core_share(data) if data.has("kernels") else None
    colors = plots.phase_colors(s.phases)
    step("report: advice", 0.2)
    findings = load_findings(data)
    step("report: steps and phases", 0.35)
    durations = step_durations(data)
    per_step = step_phases(data) if durations.num_rows else durations.slice(0, 0)
    step("report: GPU over time", 0.5)
    why_no_counters = gpu_metrics.REPORT.missing(data)
    by_phase = details.counters_by_phase(None if why_no_counters else gpu_metrics.REPORT.compute(data),
                                         why_no_counters)
    bins = time_bins(data)
    busy_pct = None
    if bins is None:
        gpu = plots.gpu_section(None, None, None, None, colors, after=by_phase)
    else:
        busy = gpu_busy(data, bins)
        gpu = plots.gpu_section(bins, busy, counters_binned(data, bins), phase_bands(data, bins), colors,
                                from_steps=bool(s.steps.count), after=by_phase)
        if busy.num_rows:
            vals = busy.column("busy_pct").to_pylist()
            busy_pct = sum(vals) / len(vals)
    traced = detail_step_count(data)
    per_step_kernel = tc.kernel_ns / traced if tc is not None and traced else None
    step("report: kernels and ops", 0.7)
    parts = [
        details.summary_section(s, busy_pct, per_step_kernel, tc),
        details.advice_section(findings),
        plots.steps_section(durations),
        plots.phases_section(s.phases, per_step, colors, "step" if s.steps.count else "wall",
                             bool(s.steps.traced_excluded)),
        gpu,
        details.kernels_section(top_kernels(data), tc),
        details.ops_section(top_ops(data)),
        details.capture_section(data.meta),
    ]
    step("report: page", 0.95)
    return page(data, "".join(parts))


def page(data: ProfileData, body: str) -> str:
    css = resources.files(__package__).joinpath("style.css").read_text(encoding="utf-8")
    name = data.path.name
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in SECTIONS)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>dlscope report: {esc(name)}</title><style>{css}</style></head><body>"
        f'<header class="top"><h1>dlscope report: {esc(name)}</h1>'
        f'<div class="sub">{esc(os.fspath(data.path))}</div></header>'
        f"<nav>{nav}</nav><main>{body}</main>"
        f"<footer>Made by dlscope {esc(__version__)} on {esc(made)} from {esc(os.fspath(data.path))}. This page "
        "is one file: it loads nothing and runs no script. Hover a bar or a point for its value.</footer>"
        "</body></html>\n")


def write_report(data: ProfileData, path: Path, progress: ProgressCallback | None = None) -> int:
    """Write the report atomically; returns its size in bytes."""
    text = render_report(data, progress).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
    return len(text)
