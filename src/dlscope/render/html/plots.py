"""The report's plotted sections: step-time distribution, phases per step, and the GPU over time
(busy share and hardware counters) with the phases shaded behind."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import pyarrow as pa

from ...analysis.core.phases import PhaseRow
from ...analysis.core.timeseries import Bins
from ...store.schema import METRICS
from . import blocks, svg

OUTSIDE = "(outside phases)"
MAX_BARS = 300  # steps drawn one bar each; more are averaged in groups
MAX_POINTS = 1000  # steps drawn one point each in the step-time line; more are grouped


def phase_colors(phases: list[PhaseRow]) -> dict[str, str]:
    """A colour per phase name, in the order phases occur in a step."""
    names = [p.name for p in phases if p.depth == 0] + [p.name for p in phases if p.depth]
    return {n: svg.color(i) for i, n in enumerate(dict.fromkeys(names))}


def steps_section(durations: pa.Table) -> str:
    """``durations``: (step, duration_ns) of the selected steps of one rank."""
    if not durations.num_rows:
        return blocks.section(
            "steps", "Step time", blocks.note("No steps were selected (no iteration markers, or only warm-up steps).")
        )
    steps = durations.column("step").to_pylist()
    ms = [d / 1e6 for d in durations.column("duration_ns").to_pylist()]
    hist = svg.histogram(ms, "step time (ms)", bins=20 if len(ms) < 200 else 40)
    lines, caption = _step_lines(steps, ms)
    seq = svg.line_chart(
        lines,
        (min(steps) - 0.5, max(steps) + 0.5),
        "ms",
        "step",
        value_fmt=lambda v: f"{v:,.3f} ms",
        height=200,
        integer_x=True,
    )
    return blocks.section(
        "steps",
        "Step time",
        f"<figure>{hist}<figcaption>Distribution of {len(ms):,} step "
        f"times</figcaption></figure><figure>{seq}<figcaption>{caption}</figcaption>"
        "</figure>" + (svg.legend([(ln.label, ln.color) for ln in lines]) if len(lines) > 1 else ""),
    )


def _step_lines(steps: list[int], ms: list[float]) -> tuple[list[svg.Line], str]:
    """Each step in order; past MAX_POINTS steps, consecutive steps in equal groups drawn as
    their mean, minimum and maximum (one point per step made a long run's report tens of MB)."""
    size = max(1, -(-len(steps) // MAX_POINTS))
    if size == 1:
        return [svg.Line("step time", svg.color(0), steps, ms)], "Each step in order"
    groups = [(steps[i : i + size], ms[i : i + size]) for i in range(0, len(steps), size)]
    xs = [sum(st) / len(st) for st, _ in groups]
    lines = [
        svg.Line("max", svg.color(3), xs, [max(v) for _, v in groups]),
        svg.Line("mean", svg.color(0), xs, [sum(v) / len(v) for _, v in groups]),
        svg.Line("min", svg.color(2), xs, [min(v) for _, v in groups]),
    ]
    return lines, f"Steps in order, in groups of {size} consecutive steps: mean, minimum and maximum of each"


def _grouped(steps: list[int], values: dict[str, list[float]]) -> tuple[list[str], dict[str, list[float]], int]:
    """At most MAX_BARS bars: consecutive steps averaged in equal groups when there are more."""
    size = max(1, -(-len(steps) // MAX_BARS))
    if size == 1:
        return [str(s) for s in steps], values, 1
    labels = [f"{steps[i]}-{steps[min(i + size, len(steps)) - 1]}" for i in range(0, len(steps), size)]
    out = {k: [sum(v[i : i + size]) / len(v[i : i + size]) for i in range(0, len(v), size)] for k, v in values.items()}
    return labels, out, size


def phases_section(
    phases: list[PhaseRow], per_step: pa.Table, colors: dict[str, str], basis: str, traced_only: bool = False
) -> str:
    rows = []
    has_gpu = any(p.gpu_ms is not None for p in phases)
    for p in phases:
        indent = "\u00a0" * 3 * p.depth  # no-break spaces: HTML does not collapse them
        cells = [
            indent + p.name,
            blocks.count(p.count),
            blocks.num(p.total_ms, 3),
            blocks.num(p.mean_ms, 3),
            blocks.pct(p.pct_of_step),
        ]
        if has_gpu:
            cells += [blocks.num(p.gpu_ms, 3), "-" if p.kernels is None else f"{p.kernels:,.0f}"]
        rows.append(cells)
    per = "/step" if basis == "step" else ""
    headers = ["phase", "count", "total ms", f"mean ms{per}", f"% of {basis} time"] + (
        [f"GPU ms launched{per}", f"kernels{per}"] if has_gpu else []
    )
    body = (
        blocks.table(headers, rows, [False] + [True] * (len(headers) - 1))
        if rows
        else blocks.note("No phases were recorded: annotate with dlscope.phase(...) (or NVTX / record_function).")
    )
    if has_gpu and traced_only:
        body += blocks.note("GPU columns are per traced step: GPU activity is recorded while tracing.")
    if per_step.num_rows:
        by_step: dict[int, dict[str, int]] = defaultdict(dict)
        for r in per_step.to_pylist():
            by_step[r["step"]][r["phase"] if r["phase"] is not None else OUTSIDE] = r["ns"]
        steps = sorted(by_step)
        names = [n for n in colors if any(n in by_step[s] for s in steps)]
        names += sorted({n for s in steps for n in by_step[s]} - set(names) - {OUTSIDE}) + [OUTSIDE]
        values = {n: [by_step[s].get(n, 0) / 1e6 for s in steps] for n in names}
        labels, values, size = _grouped(steps, values)
        col = {n: colors.get(n, svg.GREY if n == OUTSIDE else svg.color(len(colors) + i)) for i, n in enumerate(names)}
        chart = svg.stacked_bars(
            labels, [(n, col[n], values[n]) for n in names], "ms", "step", value_fmt=lambda v: f"{v:,.3f} ms"
        )
        caption = "Each step split into its outermost phases (on the step's own thread)"
        if size > 1:
            caption += f"; bars average {size} consecutive steps"
        body += f"<figure>{chart}<figcaption>{svg.esc(caption)}</figcaption></figure>" + svg.legend(
            [(n, col[n]) for n in names]
        )
    return blocks.section("phases", "Phases", body)


def _value_format(unit: str) -> Callable[[float], str]:
    """A chart's value label in ``unit`` (3 significant digits)."""

    def fmt(v: float) -> str:
        return f"{v:,.3g} {unit}".strip()

    return fmt


def _unit_scale(unit: str) -> tuple[float, str]:
    return {"bytes": (2.0**-30, "GiB"), "bytes/s": (1e-9, "GB/s")}.get(unit, (1.0, unit))


def gpu_section(
    bins: Bins | None,
    busy: pa.Table | None,
    counters: pa.Table | None,
    bands: pa.Table | None,
    colors: dict[str, str],
    from_steps: bool = True,
    after: str = "",
) -> str:
    """``after``: HTML placed under the plots (the counters per phase)."""
    if (
        bins is None
        or busy is None
        or counters is None
        or bands is None
        or (not busy.num_rows and not counters.num_rows)
    ):
        return blocks.section(
            "gpu",
            "GPU over time",
            blocks.note("No GPU activity or hardware counters in this profile (see Capture for why).") + after,
        )
    t0 = bins.start_ns
    xs = [(i + 0.5) * bins.width_ns / 1e9 for i in range(bins.count)]
    x_range = (0.0, bins.count * bins.width_ns / 1e9)
    band_list = [
        svg.Band(
            f"{b['name']} {(b['start_ns'] - t0) / 1e9:.3f}-{(b['end_ns'] - t0) / 1e9:.3f} s"
            + (f" ({b['instances']:,} instances)" if b.get("instances", 1) > 1 else ""),
            colors.get(b["name"], svg.GREY),
            (b["start_ns"] - t0) / 1e9,
            (b["end_ns"] - t0) / 1e9,
        )
        for b in bands.to_pylist()
        if b["start_ns"] is not None and b["end_ns"] is not None
    ]
    charts = []
    if busy.num_rows:
        series: dict[tuple[int, int], list[float | None]] = defaultdict(lambda: [None] * bins.count)
        for r in busy.to_pylist():
            series[(r["rank"], r["device"])][r["bin"]] = r["busy_pct"]
        lines = [
            svg.Line(f"rank {rk} GPU {dev}" if len(series) > 1 else f"GPU {dev}", svg.color(i), xs, ys)
            for i, ((rk, dev), ys) in enumerate(sorted(series.items()))
        ]
        charts.append(
            (
                "GPU busy: share of time a kernel, copy or set ran (from the trace)",
                svg.line_chart(lines, x_range, "busy %", "s", band_list, y_max=100, value_fmt=lambda v: f"{v:.1f}%"),
                lines,
            )
        )
    by_metric: dict[str, dict[tuple[int, int], list[float | None]]] = defaultdict(dict)
    for r in counters.to_pylist():
        key = (r["rank"], r["device"] if r["device"] is not None else -1)
        ys = by_metric[r["metric"]].setdefault(key, [None] * bins.count)
        if 0 <= r["bin"] < bins.count:
            ys[r["bin"]] = r["mean"]
    for metric in sorted(by_metric, key=lambda m: (list(METRICS).index(m) if m in METRICS else len(METRICS), m)):
        unit, desc = METRICS.get(metric, ("", metric))
        scale, shown = _unit_scale(unit)
        lines = []
        for i, ((rk, dev), ys) in enumerate(sorted(by_metric[metric].items())):
            who = "host" if dev < 0 else f"GPU {dev}"
            # samples come every few bins or so: join them rather than draw a dotted line
            lines.append(
                svg.Line(
                    f"rank {rk} {who}" if len({k[0] for k in by_metric[metric]}) > 1 else who,
                    svg.color(i),
                    xs,
                    [None if y is None else y * scale for y in ys],
                    gaps=False,
                )
            )
        chart = svg.line_chart(
            lines,
            x_range,
            f"{metric} ({shown})" if shown else metric,
            "s",
            band_list,
            y_max=100 if unit == "%" else None,
            value_fmt=_value_format(shown),
        )
        charts.append((f"{metric}: {desc}", chart, lines))
    body = ""
    if band_list:
        body += svg.legend(
            [(n, c) for n, c in colors.items() if any(b.label.startswith(n + " ") for b in band_list)], shaded=True
        )
    for caption, chart, lines in charts:
        if not chart:
            continue
        series_legend = svg.legend([(ln.label, ln.color) for ln in lines]) if len(lines) > 1 else ""
        body += f"<figure>{chart}<figcaption>{svg.esc(caption)}</figcaption>{series_legend}</figure>"
    origin = "the start of the first selected step" if from_steps else "the first event"
    intro = f"Seconds from {origin}, in {bins.count} bins of {bins.width_ns / 1e6:,.3f} ms" + (
        "; the outermost phases are shaded behind." if band_list else "."
    )
    return blocks.section("gpu", "GPU over time", body + after, intro)
