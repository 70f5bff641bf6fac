"""The report's text sections: the summary, top kernels and ops with the tensor-core share, the
advice findings, and how the profile was captured."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa

from ...analysis.core.layers import LayerStatus
from ...analysis.core.report import ReportResult
from ...analysis.core.summary import Summary
from ...analysis.core.tensor_core_kernels import TensorCoreShare
from ...store.meta import Meta
from ...vocabulary.severity import SEVERITIES
from ..findings import evidence_parts, group_note, saving_phrase
from ..terminal import warmup_excluded_text
from . import blocks
from .svg import esc


def summary_section(
    s: Summary, busy_pct: float | None, kernel_ns_per_step: float | None, tc: TensorCoreShare | None
) -> str:
    st = s.steps
    items = []
    if st.count:
        span = f"steps {st.first_step}-{st.last_step}" if st.first_step is not None else ""
        if st.warmup_excluded:
            span += f"; {warmup_excluded_text(st.warmup_excluded)}"
        if st.traced_excluded:
            span += f"; {len(st.traced_excluded)} traced steps timed apart"
        items.append(("steps measured", blocks.count(st.count), span))
        items.append(
            (
                "mean step",
                f"{blocks.num(st.mean_ms, 3)} ms",
                f"p50 {blocks.num(st.p50_ms, 3)} / p95 {blocks.num(st.p95_ms, 3)} / p99 {blocks.num(st.p99_ms, 3)} ms",
            )
        )
        items.append(
            (
                "throughput (mean step)",
                f"{blocks.num(st.steps_per_s)} steps/s",
                f"{blocks.num(st.samples_per_s, 1)} samples/s" if st.samples_per_s else "batch size unknown",
            )
        )
    else:
        items.append(("steps", "none", "no iteration markers: statistics cover the whole run"))
    if s.wall_ms is not None and s.wall_ms > 0:
        items.append(("wall time", f"{s.wall_ms / 1000:,.3f} s", s.source))
    h = s.headline
    if h is not None and h.gpu_util_pct is not None:  # one definition of GPU utilization, the summary's
        over = f"over {h.steps} step{'s' if h.steps != 1 else ''} with GPU data" if h.steps else "over the profile"
        items.append(("GPU busy", blocks.pct(h.gpu_util_pct), f"share of the time a kernel, copy or set ran, {over}"))
    elif busy_pct is not None:
        items.append(("GPU busy", blocks.pct(busy_pct), "share of the measured time a kernel, copy or set ran"))
    if kernel_ns_per_step is not None:
        items.append(
            (
                "kernel time",
                f"{blocks.ms(kernel_ns_per_step)} ms/step",
                "summed over streams, per traced step" if st.traced_excluded else "summed over streams",
            )
        )
    if tc is not None and tc.pct is not None:
        items.append(("tensor cores", blocks.pct(tc.pct), "of kernel time in tensor-core kernels"))
    body = blocks.cards(items)
    if st.count:
        body += blocks.table(
            ["mean ms", "p50 ms", "p95 ms", "p99 ms", "std ms", "min ms", "max ms"],
            [
                [
                    blocks.num(v, 3)
                    for v in (st.mean_ms, st.p50_ms, st.p95_ms, st.p99_ms, st.std_ms, st.min_ms, st.max_ms)
                ]
            ],
            [True] * 7,
            cls="stats",
        )
    if st.traced_excluded:
        tr = st.traced_excluded
        body += blocks.note(
            f"Timed without tracing overhead: {len(tr)} steps (between {tr[0]} and {tr[-1]}) "
            "ran with detailed tracing (ops, kernels) and are left out of the step statistics; "
            "ops and GPU figures come from them."
        )
    body += layers_table(s.layers)
    if s.selection:
        body += blocks.note(f"Selection: {s.selection}.")
    return blocks.section("summary", "Summary", body)


def layers_table(layers: dict[str, LayerStatus]) -> str:
    rows = [
        [name, f"yes ({ls.rows:,} rows)" if ls.available else "no", "" if ls.available else ls.reason]
        for name, ls in layers.items()
    ]
    return blocks.table(["layer", "captured", "why not"], rows, cls="layers")


def counters_by_phase(result: ReportResult | None, why_not: str | None) -> str:
    """The gpu_metrics report (counter mean and max per phase) as a table under the GPU plots."""
    if result is None:
        return blocks.note(f"Hardware counters: {why_not}.") if why_not else ""
    rows = [
        [
            r["name"],
            str(r["device"]),
            r["metric"],
            r["unit"] or "",
            _fmt(result.formats["mean"], r["mean"]),
            _fmt(result.formats["max"], r["max"]),
            blocks.count(r["samples"]),
        ]
        for r in result.table.to_pylist()
        if r["scope"] != "step"
    ]
    if not rows:
        return ""
    body = "<h3>Counters per phase</h3>" + blocks.table(
        ["phase", "GPU", "metric", "unit", "mean", "max", "samples"],
        rows,
        [False, True, False, False, True, True, True],
    )
    return body + "".join(blocks.note(n) for n in result.notes)


def kernels_section(top: pa.Table, tc: TensorCoreShare | None) -> str:
    if not top.num_rows:
        return blocks.section("kernels", "Top kernels", blocks.note("No kernels in this profile."))
    rows = [
        (
            r["name"],
            [
                blocks.count(r["count"]),
                blocks.ms(r["total_ns"]),
                blocks.num(None if r["mean_ns"] is None else float(r["mean_ns"]) / 1e3, 1),
                blocks.pct(r["pct"]),
            ],
            r["pct"],
        )
        for r in top.to_pylist()
    ]
    body = blocks.name_table(["kernel", "count", "total ms", "mean us", "% of kernel time"], rows)
    if tc is not None and tc.kernel_ns:
        text = (
            f"{blocks.pct(tc.pct)} of kernel time ({blocks.ms(tc.tensor_ns)} of {blocks.ms(tc.kernel_ns)} ms) "
            "ran in kernels whose names mark them as tensor-core kernels"
        )
        if tc.tensor_active_pct is not None:
            text += f"; GPM measured tensor-core activity at {tc.tensor_active_pct:.1f}% on average"
        body += f'<h3 id="tensor-cores">Tensor cores</h3>{blocks.bar_cell(tc.pct)}<p>{esc(text)}.</p>'
        if tc.kernels:
            rows = [
                (n, [f"{c:,}", blocks.ms(ns), blocks.pct(100.0 * ns / tc.kernel_ns)], 100.0 * ns / tc.kernel_ns)
                for n, c, ns in tc.kernels[:10]
            ]
            body += blocks.name_table(["tensor-core kernel", "count", "total ms", "% of kernel time"], rows)
        else:
            body += blocks.note(
                "No kernel ran on tensor cores: for matrix multiplications and convolutions, "
                "bf16/fp16 autocast or TF32 would use them."
            )
    return blocks.section("kernels", "Top kernels", body, "By total GPU time over the measured steps.")


def ops_section(top: pa.Table) -> str:
    if not top.num_rows:
        return blocks.section("ops", "Top framework ops", blocks.note("No framework ops in this profile."))
    rows = [
        (
            r["name"],
            [blocks.count(r["count"]), blocks.ms(r["self_ns"]), blocks.ms(r["total_ns"]), blocks.pct(r["pct"])],
            r["pct"],
        )
        for r in top.to_pylist()
    ]
    return blocks.section(
        "ops",
        "Top framework ops",
        blocks.name_table(["op", "count", "self ms", "total ms", "% of op self time"], rows),
        "By self time (the op's own time, its child ops excluded) on the host.",
    )


def _evidence(ev: Any) -> str:
    """Evidence as a table when it is tabular (Arrow table, list of dicts), else as text; an
    evidence object (text, saving, rows) as its text followed by its rows."""
    text, _, rows = evidence_parts(ev)
    if text is not None and rows is not None and not isinstance(ev, str):
        return f"<p>{esc(text)}</p>" + (_evidence(rows) if len(rows) else "")
    if ev is None:
        return ""
    if isinstance(ev, pa.Table):
        ev = ev.to_pylist()
    if isinstance(ev, dict):
        ev = [ev]
    if isinstance(ev, Sequence) and not isinstance(ev, str) and ev and all(isinstance(r, dict) for r in ev):
        cols = list(dict.fromkeys(k for r in ev for k in r))
        rows = [[_cell(r.get(c)) for c in cols] for r in ev[:20]]
        more = blocks.note(f"... and {len(ev) - 20:,} more rows") if len(ev) > 20 else ""
        return blocks.table(cols, rows, [isinstance(ev[0].get(c), (int, float)) for c in cols], "evidence") + more
    if isinstance(ev, Sequence) and not isinstance(ev, str):
        return "<ul>" + "".join(f"<li>{esc(_cell(x))}</li>" for x in ev) + "</ul>"
    return f"<p>{esc(ev)}</p>"


def _fmt(f: Any, v: Any) -> str:
    """A report's formatter applied to a value that may be NULL."""
    return "-" if v is None else str(f(v))


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _safe_url(url: Any) -> str | None:
    """Only http(s) links: a ``javascript:`` URL in an href would run when clicked."""
    u = str(url or "").strip()
    return u if u.lower().startswith(("https://", "http://")) else None


def advice_section(findings: list[Any]) -> str:
    if not findings:
        return blocks.section("advice", "Advice", blocks.note("No rule found a problem in this profile."))
    out = []
    for i, f in enumerate(findings):
        note = group_note(findings, i)
        if note:
            out.append(f'<p class="alternatives"><strong>Alternatives.</strong> {esc(note)}</p>')
        sev = str(getattr(f, "severity", "info")).lower()
        sev_cls = sev if sev in SEVERITIES else "info"
        saving = saving_phrase(f)
        bound = evidence_parts(getattr(f, "evidence", None))[1]
        url = _safe_url(getattr(f, "url", None))
        out.append(
            f'<article class="finding {sev_cls}"><header><span class="sev">{esc(sev)}</span> '
            f"<strong>{esc(getattr(f, 'title', ''))}</strong> <code>{esc(getattr(f, 'id', ''))}</code></header>"
            + (f'<p class="saving">Saving: {esc(saving)}</p>' if saving else "")
            + (f'<p class="bound">{esc(bound)}</p>' if bound else "")
            + (f"<p>{esc(f.advice)}</p>" if getattr(f, "advice", None) else "")
            + _evidence(getattr(f, "evidence", None))
            + (f'<p><a href="{esc(url)}" rel="noreferrer">{esc(url)}</a></p>' if url else "")
            + "</article>"
        )
    return blocks.section(
        "advice", "Advice", "".join(out), "Findings of the expert system, most costly first; savings are upper bounds."
    )


def _when(ns: int | None) -> str:
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def capture_section(meta: Meta) -> str:
    items = [
        ("source", meta.source),
        ("command", shlex.join(meta.command) if meta.command else "-"),
        ("inputs", ", ".join(meta.inputs) or "-"),
        ("host", meta.host or "-"),
        ("recorded", f"{_when(meta.start_ns)} to {_when(meta.end_ns)}"),
        ("exit code", "-" if meta.exit_code is None else str(meta.exit_code)),
        ("ranks", ", ".join(map(str, meta.ranks))),
        (
            "devices",
            "; ".join(
                f"rank {d.get('rank', 0)} GPU {d.get('index', '?')}: {d.get('name', '?')}"
                + (f", {d['sms']} SMs" if d.get("sms") else "")
                + (f", compute {d['compute_capability']}" if d.get("compute_capability") else "")
                for d in meta.devices
            )
            or "-",
        ),
        ("frameworks", ", ".join(f"{k} {v}" for k, v in meta.frameworks.items()) or "-"),
        (
            "batch size",
            (
                "-"
                if meta.batch_size is None
                else str(meta.batch_size) + (f" ({meta.batch_size_source})" if meta.batch_size_source else "")
            ),
        ),
        ("warm-up steps", str(meta.warmup_steps)),
        (
            "step window",
            "-" if not meta.step_window else ":".join("" if v is None else str(v) for v in meta.step_window),
        ),
        ("key node", meta.key_node or "-"),
        ("clock", json.dumps(meta.clock, sort_keys=True)),
        ("dropped records", ", ".join(f"{k}: {v:,}" for k, v in meta.dropped.items()) or "none"),
        ("format", f"{meta.format} {meta.format_version}, written by dlscope {meta.dlscope_version or '?'}"),
    ]
    body = blocks.key_values(items)
    if meta.collectors:
        rows = [
            [name, c.status, c.reason, json.dumps(c.settings, sort_keys=True, default=str) if c.settings else ""]
            for name, c in meta.collectors.items()
        ]
        body += "<h3>Collectors</h3>" + blocks.table(["collector", "status", "reason", "settings"], rows)
    if meta.notes:
        body += "<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in meta.notes) + "</ul>"
    return blocks.section("capture", "Capture settings", body)
