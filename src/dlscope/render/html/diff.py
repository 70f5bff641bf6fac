"""The diff view: ``dlscope diff A B --format html``. One self-contained page like the report
(inline CSS and SVG, no script, the same Content-Security-Policy, every name escaped): the two
step-time distributions, the step-time statistics with their intervals, and the rows that
changed most. Only formats what ``analysis.compare`` measured and the advice comparison the diff
use case added (``application.diff``)."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from ...analysis.compare.diff import Change, ProfileDiff
from ...vocabulary.version import __version__
from ..diff_numbers import change as _d
from ..diff_numbers import change_pct as _p
from ..diff_numbers import value as _v
from . import CSP, blocks, svg
from .svg import esc

TOP = 25
SECTIONS = (
    ("steps", "Step time"),
    ("explain", "What changed"),
    ("kernels", "Kernels"),
    ("ops", "Ops"),
    ("phases", "Phases"),
    ("gpu", "GPU"),
    ("advice", "Advice"),
    ("notes", "Notes"),
)
COLORS = (svg.PALETTE[0], svg.PALETTE[1])


def _cards(d: ProfileDiff) -> str:
    items = []
    p50 = d.shift("p50")
    if p50 and p50.a is not None:
        items.append(
            (
                "median step",
                f"{_v(p50.a, 2)} → {_v(p50.b, 2)} ms",
                f"{_p(p50.delta_pct)}, {'significant' if p50.significant else 'not significant'}",
            )
        )
    p95 = d.shift("p95")
    if p95 and p95.a is not None:
        items.append(("P95 step", f"{_v(p95.a, 2)} → {_v(p95.b, 2)} ms", _p(p95.delta_pct)))
    tp = d.throughput
    if tp.get("ratio"):
        unit = "samples/s" if tp.get("samples_per_s_a") else "steps/s"
        a = tp.get("samples_per_s_a") or tp.get("steps_per_s_a")
        b = tp.get("samples_per_s_b") or tp.get("steps_per_s_b")
        items.append(("throughput (mean step)", f"×{tp['ratio']:.3f}", f"{_v(a, 1)} → {_v(b, 1)} {unit}"))
    if d.total_delta_ms is not None:
        items.append(("mean step change", f"{_d(d.total_delta_ms, 2)} ms", "explained by the rows below"))
    return blocks.cards(items)


def _steps(d: ProfileDiff) -> str:
    hist = svg.histograms([("A", COLORS[0], d.samples_a), ("B", COLORS[1], d.samples_b)], "step time (ms)")
    legend = svg.legend([(f"A: {d.a} ({d.steps_a} steps)", COLORS[0]), (f"B: {d.b} ({d.steps_b} steps)", COLORS[1])])
    rows = [
        [
            s.stat,
            _v(s.a),
            _v(s.b),
            _d(s.delta),
            _p(s.delta_pct),
            "-" if s.ci_low is None else f"{s.ci_low:+,.3f} .. {s.ci_high:+,.3f}",
            "-" if s.p_value is None else f"{s.p_value:.2g}",
            "yes" if s.significant else "no",
            s.why,
        ]
        for s in d.shifts
    ]
    table = blocks.table(
        ["statistic", "A ms", "B ms", "change ms", "change", "95% interval", "p", "significant", "why"],
        rows,
        [False, True, True, True, True, True, True, False, False],
    )
    body = (
        f"<figure>{hist}{legend}<figcaption>The two step-time distributions on one scale</figcaption></figure>" + table
    )
    return blocks.section("steps", "Step time", body)


def _changes(anchor: str, title: str, rows: list[Change], intro: str = "") -> str:
    if not rows:
        return blocks.section(anchor, title, blocks.note("Nothing to compare."))
    shown = rows[:TOP]
    table = blocks.name_table(
        ["name", "A ms/step", "B ms/step", "change", "of step change", "status"],
        [(c.name, [_v(c.a), _v(c.b), _d(c.delta), _p(c.share_pct), c.status], abs(c.delta)) for c in shown],
    )
    more = ""
    if len(rows) > TOP:
        rest = rows[TOP:]
        more = blocks.note(
            f"{len(rest)} more rows, together {_d(sum(c.delta for c in rest))} ms per step "
            "(the JSON output has them all)."
        )
    return blocks.section(anchor, title, table + more, intro)


def _links(d: ProfileDiff) -> str:
    if not d.op_links:
        return ""
    rows = [
        [
            x.op,
            _v(x.a_ms),
            _v(x.b_ms),
            "; ".join(f"{n} ({v:.3f})" for n, v in x.vanished[:3]),
            "; ".join(f"{n} ({v:.3f})" for n, v in x.new[:3]),
        ]
        for x in d.op_links[:TOP]
    ]
    return "<h3>Replaced GPU work, matched through the op that launched it</h3>" + blocks.table(
        ["op", "A ms/step", "B ms/step", "vanished (A)", "new (B)"], rows, [False, True, True, False, False]
    )


def _gpu(d: ProfileDiff) -> str:
    rows = [
        [r["metric"], _v(r["a"], 2), _v(r["b"], 2), "-" if r["a"] is None or r["b"] is None else _d(r["b"] - r["a"], 2)]
        for r in d.gpu.get("rows", [])
    ]
    a, b = d.memory.get("peak_bytes_a"), d.memory.get("peak_bytes_b")
    if a is not None or b is not None:
        rows.append(
            [
                "memory peak (GB)",
                _v(None if a is None else a / 1e9, 2),
                _v(None if b is None else b / 1e9, 2),
                "-" if a is None or b is None else _d((b - a) / 1e9, 2),
            ]
        )
    rows += [
        [
            f"{r['metric']} peak (GB)",
            _v(None if r["a"] is None else r["a"] / 1e9, 2),
            _v(None if r["b"] is None else r["b"] / 1e9, 2),
            "-" if r["a"] is None or r["b"] is None else _d((r["b"] - r["a"]) / 1e9, 2),
        ]
        for r in d.memory.get("torch", [])
    ]
    rows += [
        [
            f"counter {r['metric']} (mean)",
            _v(r["a"], 1),
            _v(r["b"], 1),
            "-" if r["a"] is None or r["b"] is None else _d(r["b"] - r["a"], 1),
        ]
        for r in d.counters
    ]
    match = [
        [
            m.table,
            str(m.matched),
            str(m.vanished),
            str(m.new),
            "-" if m.matched_a_pct is None else f"{m.matched_a_pct:.1f}%",
            "-" if m.matched_b_pct is None else f"{m.matched_b_pct:.1f}%",
        ]
        for m in d.matching
    ]
    body = (
        blocks.table(["metric", "A", "B", "change"], rows, [False, True, True, True])
        if rows
        else blocks.note("Neither profile has GPU data.")
    )
    body += "<h3>Matching by name</h3>" + blocks.table(
        ["table", "matched", "only in A", "only in B", "A time matched", "B time matched"],
        match,
        [False, True, True, True, True, True],
    )
    return blocks.section("gpu", "GPU", body)


def _advice(adv: dict[str, list[dict[str, Any]]]) -> str:
    if not adv:
        return blocks.section("advice", "Advice", blocks.note("Advice was not compared (--no-advice)."))
    rows = (
        [["gone in B", f["id"], f["title"], _v(f["saving_ms"], 2), "-"] for f in adv.get("resolved", [])]
        + [["new in B", f["id"], f["title"], "-", _v(f["saving_ms"], 2)] for f in adv.get("new", [])]
        + [
            ["in both", f["id"], f["title"], _v(f["saving_ms_a"], 2), _v(f["saving_ms"], 2)]
            for f in adv.get("both", [])
        ]
    )
    if not rows:
        return blocks.section("advice", "Advice", blocks.note("No findings in either profile."))
    return blocks.section(
        "advice",
        "Advice",
        blocks.table(
            ["", "rule", "finding", "A saving ms/step", "B saving ms/step"], rows, [False, False, False, True, True]
        ),
    )


def diff_sections(d: ProfileDiff, advice: dict[str, list[dict[str, Any]]], brief: bool = False) -> list[str]:
    """The page's sections; ``advice``: the findings gone in B, new in B and in both (empty: not
    compared); ``brief`` (a notebook's view): the cards, the step times, what changed the step and
    the advice."""
    explain_intro = (
        "The change of the mean step time, split into parts that add up to it: GPU busy time by "
        "kernel, copy and set, and GPU idle time by cause (or the outermost phases, without GPU "
        "data). Where a side's step statistics use untraced steps, its busy rows come from the "
        "traced steps and its idle rows split the rest of the untraced step as the traced steps' "
        "idle time was split (tracing slows the host, not the GPU). "
        "Share: each row's part of the total change."
    )
    explain = _changes(
        "explain", f"What changed the mean step time ({_d(d.total_delta_ms)} ms)", d.explain, explain_intro
    )
    if brief:
        return [_cards(d), _steps(d), explain, _advice(advice)]
    return [
        _cards(d),
        _steps(d),
        explain,
        _changes("kernels", "Kernels, copies and sets (GPU time per step)", d.kernels).replace(
            "</section>", _links(d) + "</section>", 1
        ),
        _changes("ops", f"Ops ({'self GPU' if d.ops_basis == 'self_gpu' else 'self CPU'} time per step)", d.ops),
        _changes("phases", "Phases (time per step)", d.phases),
        _gpu(d),
        _advice(advice),
        blocks.section("notes", "Notes", "".join(blocks.note(n) for n in d.notes) or blocks.note("None.")),
    ]


def render_diff_page(d: ProfileDiff, advice: dict[str, list[dict[str, Any]]]) -> str:
    parts = diff_sections(d, advice)
    css = resources.files("dlscope.render.html").joinpath("style.css").read_text(encoding="utf-8")
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in SECTIONS)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>dlscope diff: {esc(os.path.basename(d.a))} vs {esc(os.path.basename(d.b))}</title>"
        f"<style>{css}</style></head><body>"
        f'<header class="top"><h1>dlscope diff</h1><div class="sub">A: {esc(d.a)}<br>B: {esc(d.b)}</div></header>'
        f"<nav>{nav}</nav><main>{''.join(parts)}</main>"
        f"<footer>Made by dlscope {esc(__version__)} on {esc(made)}. This page is one file: it loads nothing and "
        "runs no script. Hover a bar for its value.</footer></body></html>\n"
    )


def write_diff(d: ProfileDiff, advice: dict[str, list[dict[str, Any]]], path: Path) -> int:
    """Write the diff page atomically; returns its size in bytes."""
    text = render_diff_page(d, advice).encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text)
    os.replace(tmp, path)
    return len(text)
