"""The small pieces of rendering: chart geometry and labels, and progress bars that stay silent
off a terminal."""

from __future__ import annotations

import io
import re

import numpy as np
from rich.console import Console

from dlscope.render.html import svg
from dlscope.render.progress import progress


def test_histogram_bars_count_every_value_once():
    rng = np.random.default_rng(1)
    values = list(rng.normal(100, 5, 500))
    chart = svg.histogram(values, "step time (ms)", bins=25)
    counts = [int(c) for c in re.findall(r": (\d+) steps?</title>", chart)]
    assert sum(counts) == 500 and len(counts) <= 25
    lo, hi = min(values), max(values)
    edges = np.linspace(lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05, 26)
    assert sorted(counts) == sorted(int(c) for c in np.histogram(values, edges)[0] if c)


def test_ticks_are_round_and_labels_distinct():
    assert svg.nice_ticks(0, 97) == [0, 20, 40, 60, 80]
    assert svg.nice_ticks(0, 1.0, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert svg.nice_ticks(-0.5, 3.5, 8, integer=True) == [0, 1, 2, 3]
    labels = [t for _, t in svg.tick_labels(svg.nice_ticks(9.9, 10.1, 8))]
    assert len(set(labels)) == len(labels) and labels[0] == "9.90"


def test_chart_text_is_escaped():
    chart = svg.line_chart(
        [svg.Line("<b>x</b>", svg.color(0), [0, 1], [1, 2])],
        (0, 1),
        "a&b",
        "<s>",
        bands=[svg.Band("</svg><script>", "#fff", 0, 0.5)],
    )
    assert "<b>" not in chart and "<script>" not in chart and "&lt;/svg&gt;&lt;script&gt;" in chart
    assert chart.count("<svg") == 1 and chart.endswith("</svg>")


def test_lines_break_at_gaps_unless_told_to_join():
    xs, ys = [0, 1, 2, 3, 4], [1.0, 2.0, None, 3.0, 4.0]
    assert svg.line_chart([svg.Line("a", "#000", xs, ys)], (0, 4), "y", "x").count("<polyline") == 2
    assert svg.line_chart([svg.Line("a", "#000", xs, ys, gaps=False)], (0, 4), "y", "x").count("<polyline") == 1


def test_progress_is_silent_off_a_terminal_and_shown_on_one():
    quiet = io.StringIO()
    with progress("exporting", total=2, console=Console(file=quiet)) as bar:
        bar.advance()
        bar("writing", 0.5)
    assert quiet.getvalue() == "" and not bar.shown
    loud = io.StringIO()
    with progress("exporting", total=2, console=Console(file=loud, force_terminal=True, width=80)) as bar:
        bar("writing part 1", 0.5)
    assert bar.shown and "writing part 1" in loud.getvalue()


def test_findings_in_the_terminal_show_saving_evidence_and_names_verbatim():
    from dlscope.render.findings import render_findings

    from .report_helpers import FakeFinding as F

    buf = io.StringIO()
    rows = [{"kernel": f"[bold]k{i}[/bold]", "ms": 1.5 * i} for i in range(8)]
    render_findings(
        [
            F("h2d", "Pageable copies", "high", rows, 4.7, 3.6, "Pin memory [red]now[/red]", "https://x.y"),
            F("sync", "Syncs", "low", "3 cudaDeviceSynchronize per step", None, None, "", ""),
        ],
        Console(file=buf, width=120),
    )
    text = buf.getvalue()
    assert "HIGH Pageable copies (h2d)" in text and "up to 4.70 ms per step, 3.6% of step time" in text
    assert "[bold]k0[/bold]" in text and "Pin memory [red]now[/red]" in text  # markup in names shown, not applied
    assert "k4" in text and "k5" not in text and "3 more rows" in text
    assert "evidence: 3 cudaDeviceSynchronize per step" in text and "see https://x.y" in text
    buf = io.StringIO()
    render_findings([], Console(file=buf))
    assert "No rule found a problem" in buf.getvalue()


def test_a_terminal_table_stops_at_its_row_cap_and_says_so():
    """A long run's per-step table (100k rows) took rich two minutes to lay out: the terminal
    shows TABLE_MAX_ROWS rows and how many more there are; csv keeps every row."""
    import pyarrow as pa

    from dlscope.render.tables import TABLE_MAX_ROWS, render

    n = TABLE_MAX_ROWS + 1234
    table = pa.table({"step": list(range(n)), "ms": [1.5] * n})
    buf = io.StringIO()
    render(table, "table", Console(file=buf, width=100, force_terminal=False))
    out = buf.getvalue()
    assert f"{TABLE_MAX_ROWS - 1:,}" in out and f"{TABLE_MAX_ROWS:,} " not in out.split("more rows")[0]
    assert "1,234 more rows" in out
    buf = io.StringIO()
    render(table, "csv", Console(file=buf, width=100))
    assert len(buf.getvalue().strip().splitlines()) == n + 1
