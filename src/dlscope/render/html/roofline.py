"""The report's roofline section: each modelled op shape at its arithmetic intensity and achieved
TFLOP/s (log-log), sized by its kernel time, under the GPU's roofs (the memory bandwidth up to each
ridge, then the compute peak of the precisions the ops ran in). The figures are the roofline
report's (``analysis.reports.roofline``, measured by ``application.report``); this only lays them out."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import blocks, svg

if TYPE_CHECKING:
    from ...analysis.reports.roofline import OpRoof, Roofline

INTRO = (
    "Each op shape the performance model counts FLOPs for, at its arithmetic intensity (FLOPs per byte of "
    "compulsory memory traffic) and the TFLOP/s its kernels reached, the area of its dot by its kernel time. "
    "The lines are the GPU's roofs: memory bandwidth up to the ridge, then the compute peak of the precision "
    "the op ran in. 'dlscope stats --report roofline' has the table."
)
# the roofs span from this factor below the smallest intensity (or ridge) to this factor above the largest
SPAN = 3.0


def roofline_section(r: Roofline | None, why_not: str | None) -> str:
    """The section of ``r`` (the roofline of a profile with shapes and a known GPU), or one line saying
    why there is none."""
    if r is None or r.gpu.peaks is None:
        return blocks.section("roofline", "Roofline", blocks.note(f"No roofline: {why_not or 'not measured'}."))
    peaks = r.gpu.peaks
    drawn = plotted(r)
    if not drawn:
        return blocks.section(
            "roofline",
            "Roofline",
            blocks.note("No roofline: no op with floating-point work ran in the selected steps."),
        )
    roofs = sorted({(o.peak_label or "", o.peak_tflops or 0.0) for o in drawn}, key=lambda t: -t[1])
    colors = {label: svg.color(i) for i, (label, _) in enumerate(roofs)}
    bw = peaks.hbm_tbs  # TB/s: TFLOP/s = TB/s x FLOP/B
    ridges = [peak / bw for _, peak in roofs]
    intensities = [o.intensity or 0.0 for o in drawn]
    lo, hi = min(intensities + ridges) / SPAN, max(intensities + ridges) * SPAN
    paths = [
        svg.Polyline(f"{label} {peak:g} TFLOP/s", colors[label], [(lo, bw * lo), (peak / bw, peak), (hi, peak)])
        for label, peak in roofs
    ]
    top = max(o.ns for o in drawn) or 1
    dots = [
        svg.Dot(o.intensity or 0.0, o.tflops or 0.0, o.ns / top, colors[o.peak_label or ""], point_label(o))
        for o in drawn
    ]
    chart = svg.loglog_chart(dots, paths, "arithmetic intensity (FLOP/byte)", "TFLOP/s", dot_class="roof-pt")
    legend = svg.legend([(f"{label} (ridge {peak / bw:,.0f} FLOP/B)", colors[label]) for label, peak in roofs])
    shown = {id(o) for o in drawn}
    left = [o for o in r.ops if id(o) not in shown]
    notes = [
        f"GPU: {r.gpu.name} = {peaks.name}: memory {bw:g} TB/s ({peaks.source}).",
        f"{len(drawn)} op shape{'s' if len(drawn) != 1 else ''} drawn, {blocks.ms(sum(o.ns for o in drawn))} ms of "
        "kernel time.",
    ]
    if left:
        notes.append(
            f"{len(left)} modelled op shape{'s' if len(left) != 1 else ''} without floating-point work (copies, "
            f"elementwise and optimizer ops: {blocks.ms(sum(o.ns for o in left))} ms) sit at zero intensity, off a "
            "log axis, and are not drawn."
        )
    if r.unmodelled_ns:
        notes.append(f"{blocks.ms(r.unmodelled_ns)} ms of kernel time belongs to ops without a model (not drawn).")
    return blocks.section(
        "roofline",
        "Roofline",
        f"<figure>{chart}<figcaption>Ops against the roofline of the {svg.esc(peaks.name)}</figcaption></figure>"
        + legend
        + "".join(blocks.note(n) for n in notes),
        INTRO,
    )


def plotted(r: Roofline) -> list[OpRoof]:
    """The op shapes the chart draws: modelled, held to a peak, with FLOPs and kernel time."""
    return [
        o
        for o in r.ops
        if o.peak_tflops and o.tflops and o.intensity and o.cost.flops > 0 and o.ns > 0 and o.peak_pct is not None
    ]


def point_label(o: OpRoof) -> str:
    """The hover text of one op shape."""
    detail = f" ({o.cost.detail})" if o.cost.detail else ""
    return (
        f"{o.op} {o.input_shapes or ''}{detail}: {o.intensity or 0:,.1f} FLOP/B, {o.tflops or 0:,.2f} TFLOP/s, "
        f"{o.ns / 1e6:,.3f} ms in {o.calls:,} calls, {o.peak_pct or 0:.1f}% of its {o.peak_label} roofline"
    )
