"""Charts as inline SVG, drawn in Python.

Why SVG from Python rather than a plotting library's JavaScript inlined in the page: the report
must work offline and stay one small file. Plotly's bundle alone is ~3.5 MB and would become a
core dependency; the charts here are a handful of bars and lines over at most a few hundred
points, which SVG draws exactly, prints well, needs no script at all (so the page can forbid
scripts outright), and leaves one place where text is escaped. Hovering any bar or point shows
its value (SVG ``<title>``).

Every function takes plain numbers and already-chosen labels and returns an ``<svg>`` string;
every label passes through :func:`esc`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Tableau 10: distinguishable, colour-blind friendly enough, and printable
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
GREY = "#c8c8c8"
WIDTH = 900
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 64, 16, 12, 40


def esc(text: object) -> str:
    """Text for HTML or SVG content and attribute values: ``& < > " '`` escaped."""
    return html.escape(str(text), quote=True)


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]; whole numbers only
    with ``integer`` (steps, counts)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    if integer:
        raw = max(raw, 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def tick_labels(ticks: Sequence[float]) -> list[tuple[float, str]]:
    """Ticks with labels of as many decimals as their spacing needs (9.95, 10, 10.05; not 10.1 twice)."""
    if len(ticks) < 2:
        return [(t, fmt_num(t)) for t in ticks]
    step = abs(ticks[1] - ticks[0])
    digits = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    if max(abs(t) for t in ticks) >= 1e6:
        return [(t, fmt_num(t)) for t in ticks]
    return [(t, f"{t:,.{digits}f}") for t in ticks]


def fmt_num(v: float) -> str:
    """A tick label: few digits, no trailing zeros."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.3g}"
    digits = 0 if a >= 100 else 1 if a >= 10 else 2 if a >= 1 else 3
    return f"{v:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{v:,.0f}"


@dataclass
class Frame:
    """The plotting area of a chart and its data ranges."""

    height: int
    x0: float
    x1: float
    y0: float
    y1: float

    @property
    def left(self) -> float:
        return MARGIN_L

    @property
    def right(self) -> float:
        return WIDTH - MARGIN_R

    @property
    def top(self) -> float:
        return MARGIN_T

    @property
    def bottom(self) -> float:
        return self.height - MARGIN_B

    def x(self, v: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (v - self.x0) / span * (self.right - self.left)

    def y(self, v: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.bottom - (v - self.y0) / span * (self.bottom - self.top)


def _open(frame: Frame, label: str) -> list[str]:
    return [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {frame.height}" role="img" aria-label="{esc(label)}" '
        'xmlns="http://www.w3.org/2000/svg">'
    ]


def _axes(
    frame: Frame,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]] | None = None,
    integer_x: bool = False,
    integer_y: bool = False,
    y_ticks: Sequence[tuple[float, str]] | None = None,
) -> list[str]:
    out = []
    if y_ticks is None:
        y_ticks = tick_labels(nice_ticks(frame.y0, frame.y1, integer=integer_y))
    for t, text in y_ticks:
        y = frame.y(t)
        out.append(f'<line class="grid" x1="{frame.left}" x2="{frame.right}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(text)}</text>')
    if x_ticks is None:
        x_ticks = tick_labels(nice_ticks(frame.x0, frame.x1, 8, integer=integer_x))
    for v, text in x_ticks:
        x = frame.x(v)
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.bottom}" y2="{frame.bottom + 4}"/>')
        out.append(f'<text class="tick" x="{x:.1f}" y="{frame.bottom + 16}" text-anchor="middle">{esc(text)}</text>')
    out.append(f'<line class="axis" x1="{frame.left}" x2="{frame.right}" y1="{frame.bottom}" y2="{frame.bottom}"/>')
    out.append(
        f'<text class="label" x="{(frame.left + frame.right) / 2:.1f}" y="{frame.height - 4}" '
        f'text-anchor="middle">{esc(x_label)}</text>'
    )
    out.append(
        f'<text class="label" transform="translate(14 {(frame.top + frame.bottom) / 2:.1f}) rotate(-90)" '
        f'text-anchor="middle">{esc(y_label)}</text>'
    )
    return out


def histogram(values: Sequence[float], x_label: str, bins: int = 30, height: int = 200) -> str:
    """Counts of ``values`` in equal bins (the step-time distribution). The range is padded so
    that a few values show as a few bars, not as one block."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.05 or max(abs(lo) * 0.01, 1e-3)
    lo, hi = lo - pad, hi + pad
    n = max(1, bins)
    width = (hi - lo) / n
    counts = [0] * n
    for v in vals:
        counts[min(n - 1, int((v - lo) / width))] += 1
    frame = Frame(height, lo, hi, 0, max(counts) * 1.1)
    out = _open(frame, "histogram of " + x_label) + _axes(frame, x_label, "steps", integer_y=True)
    for i, c in enumerate(counts):
        if not c:
            continue
        a, b = lo + i * width, lo + (i + 1) * width
        x, y = frame.x(a), frame.y(c)
        out.append(
            f'<rect class="bar" x="{x + 0.5:.1f}" y="{y:.1f}" width="{max(frame.x(b) - x - 1, 1):.1f}" '
            f'height="{frame.bottom - y:.1f}" fill="{PALETTE[0]}"><title>{esc(fmt_num(a))} to '
            f"{esc(fmt_num(b))}: {c} step{'s' if c != 1 else ''}</title></rect>"
        )
    out.append("</svg>")
    return "".join(out)


def stacked_bars(
    labels: Sequence[str],
    segments: Sequence[tuple[str, str, Sequence[float]]],
    y_label: str,
    x_label: str,
    height: int = 260,
    value_fmt: Callable[[float], str] = fmt_num,
) -> str:
    """One bar per label, stacked from ``segments`` (name, colour, one value per label)."""
    if not labels:
        return ""
    totals = [sum(seg[2][i] for seg in segments) for i in range(len(labels))]
    frame = Frame(height, 0, len(labels), 0, (max(totals) or 1) * 1.05)
    every = max(1, math.ceil(len(labels) / 20))
    ticks = [(i + 0.5, labels[i]) for i in range(0, len(labels), every)]
    out = _open(frame, y_label + " per " + x_label) + _axes(frame, x_label, y_label, ticks)
    slot = (frame.right - frame.left) / len(labels)
    bar_w = max(slot * 0.8, 0.5)
    for i, label in enumerate(labels):
        base = 0.0
        x = frame.left + i * slot + (slot - bar_w) / 2
        for name, col, values in segments:
            v = values[i]
            if v <= 0:
                continue
            y_top, y_bot = frame.y(base + v), frame.y(base)
            out.append(
                f'<rect class="seg" x="{x:.1f}" y="{y_top:.1f}" width="{bar_w:.1f}" '
                f'height="{max(y_bot - y_top, 0.3):.1f}" fill="{col}"><title>{esc(x_label)} {esc(label)}: '
                f"{esc(name)} {esc(value_fmt(v))}</title></rect>"
            )
            base += v
    out.append("</svg>")
    return "".join(out)


@dataclass
class Line:
    label: str
    color: str
    xs: Sequence[float]
    ys: Sequence[float | None]  # None: no value there
    gaps: bool = True  # break the line where there is no value (else join the neighbours)


@dataclass
class Band:
    label: str
    color: str
    x0: float
    x1: float


def line_chart(
    lines: Sequence[Line],
    x_range: tuple[float, float],
    y_label: str,
    x_label: str,
    bands: Sequence[Band] = (),
    y_max: float | None = None,
    height: int = 220,
    value_fmt: Callable[[float], str] = fmt_num,
    integer_x: bool = False,
) -> str:
    """Lines over a shared x axis, with shaded ``bands`` (phases) behind them."""
    ys = [y for ln in lines for y in ln.ys if y is not None and math.isfinite(y)]
    if not ys:
        return ""
    top = y_max if y_max is not None else (max(ys) * 1.1 or 1.0)
    frame = Frame(height, x_range[0], x_range[1], min(0.0, min(ys)), top)
    out = _open(frame, y_label + " over " + x_label)
    for b in bands:
        a, z = frame.x(max(b.x0, frame.x0)), frame.x(min(b.x1, frame.x1))
        if z <= a:
            continue
        out.append(
            f'<rect class="band" x="{a:.1f}" y="{frame.top}" width="{max(z - a, 0.5):.1f}" '
            f'height="{frame.bottom - frame.top:.1f}" fill="{b.color}"><title>{esc(b.label)}</title></rect>'
        )
    out += _axes(frame, x_label, y_label, integer_x=integer_x)
    for ln in lines:
        runs: list[list[str]] = [[]]
        points = []
        for x, y in zip(ln.xs, ln.ys):
            if y is None or not math.isfinite(y):
                if ln.gaps:
                    runs.append([])
                continue
            px, py = frame.x(x), frame.y(y)
            runs[-1].append(f"{px:.1f},{py:.1f}")
            points.append((px, py, x, y))
        for run in runs:
            if len(run) > 1:
                out.append(f'<polyline class="line" fill="none" stroke="{ln.color}" points="{" ".join(run)}"/>')
        for px, py, x, y in points:
            out.append(
                f'<circle class="pt" cx="{px:.1f}" cy="{py:.1f}" r="{2 if len(points) < 80 else 1.2}" '
                f'fill="{ln.color}"><title>{esc(ln.label)} at {esc(fmt_num(x))} {esc(x_label)}: '
                f"{esc(value_fmt(y))}</title></circle>"
            )
    out.append("</svg>")
    return "".join(out)


def legend(items: Sequence[tuple[str, str]], shaded: bool = False) -> str:
    """HTML legend: (label, colour) swatches."""
    cls = "swatch band-swatch" if shaded else "swatch"
    return (
        '<div class="legend">'
        + "".join(
            f'<span class="item"><span class="{cls}" style="background:{c}"></span>{esc(label)}</span>'
            for label, c in items
        )
        + "</div>"
    )


def histograms(
    series: Sequence[tuple[str, str, Sequence[float]]], x_label: str, bins: int = 24, height: int = 220
) -> str:
    """Several distributions (label, colour, values) over one shared range and bin grid, their
    bars side by side in each bin, so that a shift between them reads directly (the diff view)."""
    vals = [v for _, _, vs in series for v in vs if math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    pad = (hi - lo) * 0.05 or max(abs(lo) * 0.01, 1e-3)
    lo, hi = lo - pad, hi + pad
    n = max(1, bins)
    width = (hi - lo) / n
    counts = []
    for _, _, vs in series:
        c = [0] * n
        for v in vs:
            if math.isfinite(v):
                c[min(n - 1, int((v - lo) / width))] += 1
        counts.append(c)
    frame = Frame(height, lo, hi, 0, max(max(c) for c in counts) * 1.1 or 1.0)
    out = _open(frame, "histograms of " + x_label) + _axes(frame, x_label, "steps", integer_y=True)
    k = len(series)
    for j, ((label, col, _), c) in enumerate(zip(series, counts)):
        for i, cnt in enumerate(c):
            if not cnt:
                continue
            a, b = lo + i * width, lo + (i + 1) * width
            xa, xb = frame.x(a), frame.x(b)
            w = max((xb - xa - 1) / k, 0.5)
            x, y = xa + 0.5 + j * w, frame.y(cnt)
            out.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{frame.bottom - y:.1f}" '
                f'fill="{col}"><title>{esc(label)}: {esc(fmt_num(a))} to {esc(fmt_num(b))}: {cnt} '
                f"step{'s' if cnt != 1 else ''}</title></rect>"
            )
    out.append("</svg>")
    return "".join(out)


@dataclass
class Dot:
    """A point of a log-log chart: data coordinates (> 0), its area's share of the largest (0..1), and
    its hover text."""

    x: float
    y: float
    size: float
    color: str
    label: str


@dataclass
class Polyline:
    """A polyline of a log-log chart in data coordinates (> 0), labelled at its last point."""

    label: str
    color: str
    points: Sequence[tuple[float, float]]


MIN_R, MAX_R = 2.5, 16.0  # a dot's radius in px: the smallest stays visible, the largest covers few others


def decades(lo: float, hi: float) -> tuple[int, int]:
    """The powers of ten around [lo, hi] (both > 0): a log axis from 10**a to 10**b."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return a, b if b > a else a + 1


def log_ticks(a: int, b: int) -> list[tuple[float, str]]:
    """Ticks of a log axis from 10**a to 10**b, at log10 positions: each decade, and 2x and 5x within it
    when the axis spans two decades or less (else a chart of one decade would have two ticks)."""
    steps = (1, 2, 5) if b - a <= 2 else (1,)
    return [(k + math.log10(m), fmt_num(m * 10.0**k)) for k in range(a, b + 1) for m in steps if k < b or m == 1]


def loglog_chart(
    dots: Sequence[Dot],
    paths: Sequence[Polyline],
    x_label: str,
    y_label: str,
    height: int = 380,
    dot_class: str = "dot",
) -> str:
    """Dots (area by ``size``) over labelled polylines, both axes logarithmic with a tick per decade
    (the roofline). Values that are not positive cannot be drawn on a log axis and are left out."""
    ok = [d for d in dots if d.x > 0 and d.y > 0 and math.isfinite(d.x) and math.isfinite(d.y)]
    xs = [d.x for d in ok] + [x for p in paths for x, _ in p.points if x > 0]
    ys = [d.y for d in ok] + [y for p in paths for _, y in p.points if y > 0]
    if not xs or not ys:
        return ""
    xa, xb = decades(min(xs), max(xs))
    ya, yb = decades(min(ys), max(ys))
    frame = Frame(height, xa, xb, ya, yb)
    x_ticks, y_ticks = log_ticks(xa, xb), log_ticks(ya, yb)
    out = _open(frame, f"{y_label} over {x_label}, log-log")
    out += _axes(frame, x_label, y_label, x_ticks, y_ticks=y_ticks)
    for p in paths:
        pts = [(frame.x(math.log10(x)), frame.y(math.log10(y))) for x, y in p.points if x > 0 and y > 0]
        if len(pts) < 2:
            continue
        out.append(
            f'<polyline class="roof" fill="none" stroke="{p.color}" points="'
            + " ".join(f"{x:.2f},{y:.2f}" for x, y in pts)
            + f'"><title>{esc(p.label)}</title></polyline>'
        )
        x, y = pts[-1]
        # under the flat end of the line: above it the label would leave the frame at the top decade
        out.append(f'<text class="roof-label" x="{x - 4:.1f}" y="{y + 14:.1f}" text-anchor="end">{esc(p.label)}</text>')
    for d in sorted(ok, key=lambda d: -d.size):  # the largest first: small dots stay on top, visible
        r = MIN_R + (MAX_R - MIN_R) * math.sqrt(max(0.0, min(1.0, d.size)))
        cx, cy = frame.x(math.log10(d.x)), frame.y(math.log10(d.y))
        out.append(
            f'<circle class="{esc(dot_class)}" cx="{cx:.2f}" cy="{cy:.2f}" r="{r:.1f}" fill="{d.color}" '
            f'fill-opacity="0.55" stroke="{d.color}"><title>{esc(d.label)}</title></circle>'
        )
    out.append("</svg>")
    return "".join(out)
