"""The HTML report's roofline chart on the stored full-mode H200 profiles: one dot per modelled op shape with
floating-point work, placed (read back through the chart's own decade ticks) at the roofline report's
intensity and TFLOP/s, the roofs at the report's ridge and peak; without shapes or a known GPU the section
says why in one line; names are escaped."""

from __future__ import annotations

import json
import math
import re
import shutil
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dlscope.analysis import REPORTS
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports.roofline import roofline
from dlscope.application.report import build_report
from dlscope.render.html import render_report
from dlscope.render.html.roofline import roofline_section

from .conftest import DATA, need_file

ROOF = DATA / "roofline"
PROFILES = ["mm_probe_bf16", "gpt_bf16_full", "cnn_bf16_full", "gpt_fused_full", "odd_linear_k1001"]
DEFAULT_MODE = DATA / "advice_truth" / "gpt_baseline_default.dlscope"


class _Svg(HTMLParser):
    """The roofline section's chart: its dots (centre, radius, hover text), roofs and tick labels."""

    def __init__(self) -> None:
        super().__init__()
        self.dots: list[dict] = []
        self.roofs: list[list[tuple[float, float]]] = []
        self.ticks: list[tuple[dict, str]] = []
        self._open: tuple[str, dict] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "circle" and a.get("class") == "roof-pt":
            self.dots.append({"cx": float(a["cx"]), "cy": float(a["cy"]), "r": float(a["r"]), "title": ""})
            self._open = ("dot", a)
        elif tag == "polyline" and a.get("class") == "roof":
            self.roofs.append([tuple(map(float, p.split(","))) for p in a["points"].split()])
        elif tag == "text" and a.get("class") == "tick":
            self._open = ("tick", a)
        elif tag != "title":
            self._open = None

    def handle_data(self, data):
        if self._open is None:
            return
        kind, a = self._open
        if kind == "dot":
            self.dots[-1]["title"] += data
        else:
            self.ticks.append((a, data))
            self._open = None


def _section(html: str) -> str:
    i = html.index('<h2 id="roofline"')
    return html[i : html.index("</section>", i)]


def _axis(ticks: list[tuple[dict, str]], anchor: str, coord: str) -> tuple[float, float]:
    """(pixels per decade, pixel of 10^0) of the axis whose tick labels have ``anchor``, from its first
    and last decade label (1,000 -> 3; 0.01 -> -2)."""
    marks = [
        (math.log10(float(t.replace(",", ""))), float(a[coord])) for a, t in ticks if a.get("text-anchor") == anchor
    ]
    marks = [(k, p) for k, p in marks if abs(k - round(k)) < 1e-9]
    (k0, p0), (k1, p1) = marks[0], marks[-1]
    per = (p1 - p0) / (k1 - k0)
    return per, p0 - k0 * per


def _report_rows(path: Path) -> list[dict]:
    """The roofline report's modelled rows with FLOPs and a roof: the op shapes the chart draws."""
    rows = REPORTS["roofline"].compute(ProfileData.open(path)).rows()
    return [r for r in rows if r["flops"] and r["peak_pct"] is not None and r["gpu_ms"] > 0]


@pytest.mark.parametrize("name", PROFILES)
def test_one_dot_per_op_shape_at_the_reports_intensity_and_rate(name: str) -> None:
    path = ROOF / f"{name}.dlscope"
    need_file(path)
    html = render_report(build_report(ProfileData.open(path)))
    chart = _Svg()
    chart.feed(_section(html))
    rows = _report_rows(path)
    assert rows and len(chart.dots) == len(rows)
    # the chart's own decade ticks map pixels back to values: x ticks are centred under the axis, y ticks
    # right-aligned left of it (the y tick's text sits 4 px below its grid line)
    x_per, x_at_1 = _axis(chart.ticks, "middle", "x")
    y_per, y_at_1 = _axis(chart.ticks, "end", "y")
    y_at_1 -= 4
    by_title = {d["title"]: d for d in chart.dots}
    for r in rows:
        head = f"{r['op']} {r['input_shapes']}" + (f" ({r['detail']})" if r["detail"] else "") + ":"
        (title,) = [t for t in by_title if t.startswith(head)]
        d = by_title[title]
        assert 10 ** ((d["cx"] - x_at_1) / x_per) == pytest.approx(r["intensity"], rel=1e-3), title
        assert 10 ** ((d["cy"] - y_at_1) / y_per) == pytest.approx(r["tflops"], rel=1e-3), title
        assert f"{r['peak_pct']:.1f}% of its" in title
    # the area grows with the kernel time: the op shape with the most time has the largest dot
    longest = max(rows, key=lambda r: r["gpu_ms"])
    assert max(chart.dots, key=lambda d: d["r"])["title"].startswith(f"{longest['op']} {longest['input_shapes']}")
    # one roof per peak the drawn ops are held to: the bend at (ridge, peak), flat after it
    peaks = {(float(r["peak"].rsplit(" ", 1)[1]), r["ridge"]) for r in rows}
    assert len(chart.roofs) == len(peaks)
    bends = []
    for line in chart.roofs:
        (x0, y0), (x1, y1), (x2, y2) = line
        assert y2 == y1 and x2 > x1 > x0
        ridge, peak = 10 ** ((x1 - x_at_1) / x_per), 10 ** ((y1 - y_at_1) / y_per)
        # the slope below the ridge is the memory bandwidth: TFLOP/s over FLOP/B is TB/s (the H200's 4.8)
        bw = 10 ** ((y0 - y_at_1) / y_per) / 10 ** ((x0 - x_at_1) / x_per)
        assert bw == pytest.approx(4.8, rel=2e-3)
        bends.append((peak, ridge))
    flat = [v for pair in sorted(bends) for v in pair]
    assert flat == pytest.approx([v for pair in sorted(peaks) for v in pair], rel=1e-3)


def test_without_shapes_the_section_says_full_mode_in_one_line() -> None:
    need_file(DEFAULT_MODE)
    section = _section(render_report(build_report(ProfileData.open(DEFAULT_MODE))))
    assert "<svg" not in section
    (line,) = re.findall(r'<p class="note">(.*?)</p>', section)
    assert line.startswith("No roofline: the profile has no input shapes") and "--mode full" in line


def test_an_unknown_gpu_says_why_there_is_no_roofline(tmp_path: Path) -> None:
    src = ROOF / "mm_probe_bf16.dlscope"
    need_file(src)
    copy = tmp_path / "p.dlscope"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".cache"))
    meta = json.loads((copy / "meta.json").read_text())
    for d in meta["devices"]:
        d["name"] = "NVIDIA A100-PG509-200"  # a real name the datasheet table lacks (test_roofline)
    (copy / "meta.json").write_text(json.dumps(meta))
    section = _section(render_report(build_report(ProfileData.open(copy))))
    assert "<svg" not in section
    (line,) = re.findall(r'<p class="note">(.*?)</p>', section)
    assert line.startswith("No roofline: ") and "not in dlscope" in line


def test_names_in_the_chart_are_escaped() -> None:
    """Op names come from the profile: a name made to break out of the SVG is shown as text."""
    src = ROOF / "mm_probe_bf16.dlscope"
    need_file(src)
    r = roofline(ProfileData.open(src))
    evil = '<img src=x onerror=alert(1)>"'
    ops = tuple(replace(o, op=evil) if o.op == "aten::mm" else o for o in r.ops)
    html = roofline_section(replace(r, ops=ops), None)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;&quot;" in html
