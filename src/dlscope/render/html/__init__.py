"""The HTML report: one self-contained file (inline CSS and SVG, no script, no network) that can
be mailed, attached to an issue or opened years later.

The page forbids every script and every external load with its Content-Security-Policy, so even
a name that slipped through escaping could not run; every profile-derived string is escaped
anyway (:func:`svg.esc`). The report use case (``application.report``) measures and judges the
profile into a :class:`ReportModel`; this package only lays it out.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

from ...vocabulary.version import __version__
from ..progress import ProgressCallback
from . import details, plots, roofline
from .model import ReportModel
from .modules import modules_section
from .svg import esc

__all__ = ["ReportModel", "render_report", "write_report"]

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
SECTIONS = (
    ("summary", "Summary"),
    ("advice", "Advice"),
    ("steps", "Steps"),
    ("phases", "Phases"),
    ("gpu", "GPU over time"),
    ("kernels", "Kernels"),
    ("ops", "Ops"),
    ("roofline", "Roofline"),
    ("modules", "Modules"),
    ("capture", "Capture"),
)


def render_report(model: ReportModel, progress: ProgressCallback | None = None) -> str:
    """The page of ``model`` (built by ``application.report``)."""
    s = model.summary
    colors = plots.phase_colors(s.phases)
    by_phase = details.counters_by_phase(model.counters_by_phase, model.why_no_counters)
    g = model.gpu
    if g is None:
        gpu = plots.gpu_section(None, None, None, None, colors, after=by_phase)
    else:
        gpu = plots.gpu_section(
            g.bins, g.busy, g.counters, g.bands, colors, from_steps=bool(s.steps.count), after=by_phase
        )
    parts = [
        details.summary_section(s, model.busy_pct, model.kernel_ns_per_step, model.tensor_cores),
        details.advice_section(model.findings),
        plots.steps_section(model.durations),
        plots.phases_section(
            s.phases, model.per_step, colors, "step" if s.steps.count else "wall", bool(s.steps.traced_excluded)
        ),
        gpu,
        details.kernels_section(model.top_kernels, model.tensor_cores),
        details.ops_section(model.top_ops),
        roofline.roofline_section(model.roofline, model.why_no_roofline),
        modules_section(model.modules),
        details.capture_section(model.meta),
    ]
    if progress is not None:
        progress("report: page", 0.95)
    return page(model.path, "".join(parts))


def page(path: Path, body: str) -> str:
    css = resources.files(__package__).joinpath("style.css").read_text(encoding="utf-8")
    name = path.name
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in SECTIONS)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>dlscope report: {esc(name)}</title><style>{css}</style></head><body>"
        f'<header class="top"><h1>dlscope report: {esc(name)}</h1>'
        f'<div class="sub">{esc(os.fspath(path))}</div></header>'
        f"<nav>{nav}</nav><main>{body}</main>"
        f"<footer>Made by dlscope {esc(__version__)} on {esc(made)} from {esc(os.fspath(path))}. This page "
        "is one file: it loads nothing and runs no script. Hover a bar or a point for its value.</footer>"
        "</body></html>\n"
    )


def write_report(model: ReportModel, path: Path, progress: ProgressCallback | None = None) -> int:
    """Write the report of ``model`` atomically; returns its size in bytes."""
    text = render_report(model, progress).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
    return len(text)
