"""``dlscope diff`` for the terminal: only formats what ``analysis.compare`` measured and the advice
comparison the diff use case added (``application.diff``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..analysis.compare.diff import Change, ProfileDiff
from .diff_numbers import change as _d
from .diff_numbers import change_pct as _p
from .diff_numbers import value as _v

NAME_WIDTH = 60


def _name(n: str) -> str:
    n = n if len(n) <= NAME_WIDTH else n[: NAME_WIDTH - 3] + "..."
    return escape(n)


def _table(*cols: str) -> Table:
    t = Table(show_edge=False, header_style="bold", pad_edge=False)
    for i, c in enumerate(cols):
        t.add_column(c, justify="left" if i == 0 else "right", no_wrap=i == 0)
    return t


def _changes(
    out: Console, title: str, rows: list[Change], top: int, unit: str = "ms/step", counts: bool = False
) -> None:
    if not rows:
        return
    out.print(f"\n[bold]{escape(title)}[/bold]")
    cols = ["name", f"A {unit}", f"B {unit}", "change", "of step change", "status"]
    if counts:
        cols += ["calls A", "calls B"]
    t = _table(*cols)
    for c in rows[:top]:
        cells = [_name(c.name), _v(c.a), _v(c.b), _d(c.delta), _p(c.share_pct), c.status]
        if counts:
            cells += [_v(c.count_a, 1), _v(c.count_b, 1)]
        t.add_row(*cells)
    out.print(t)
    if len(rows) > top:
        rest = rows[top:]
        out.print(
            f"  ... {len(rest)} more rows, together {_d(sum(c.delta for c in rest))} ms/step "
            "(--top N or --format json for all)"
        )


def render_diff(d: ProfileDiff, advice: dict[str, list[dict[str, Any]]], out: Console, top: int = 12) -> None:
    """``advice``: the findings gone in B, new in B and in both (empty: not compared)."""
    out.print(f"[bold]dlscope diff[/bold]  A: {escape(d.a)}")
    out.print(f"              B: {escape(d.b)}")
    out.print(f"\n[bold]Step time[/bold]  {d.steps_a} steps in A, {d.steps_b} in B")
    t = _table("statistic", "A ms", "B ms", "change ms", "change", "95% interval of the change", "p", "significant")
    for s in d.shifts:
        ci = "-" if s.ci_low is None else f"{s.ci_low:+,.3f} .. {s.ci_high:+,.3f}"
        t.add_row(
            s.stat,
            _v(s.a),
            _v(s.b),
            _d(s.delta),
            _p(s.delta_pct),
            ci,
            "-" if s.p_value is None else f"{s.p_value:.2g}",
            "yes" if s.significant else "no",
        )
    out.print(t)
    p50 = d.shift("p50")
    if p50 is not None:
        out.print(f"  median: {escape(p50.why)}")
    tp = d.throughput
    if tp.get("ratio"):
        if tp.get("samples_per_s_a"):
            out.print(
                f"  throughput: {tp['samples_per_s_a']:,.1f} -> {tp['samples_per_s_b']:,.1f} samples/s "
                f"(x{tp['ratio']:.3f}; batch {tp['batch_a']} -> {tp['batch_b']}; {tp['basis']})"
            )
            if tp.get("per_sample"):
                out.print(f"  time per sample: {escape(tp['per_sample']['why'])}")
        else:
            out.print(
                f"  throughput: {tp['steps_per_s_a']:,.2f} -> {tp['steps_per_s_b']:,.2f} steps/s "
                f"(x{tp['ratio']:.3f}; {tp['basis']})"
            )

    if d.total_delta_ms is not None:
        basis = {d.decomposition_a.basis, d.decomposition_b.basis}
        how = (
            "GPU busy by kernel, GPU idle by cause"
            if basis == {"gpu"}
            else "outermost phases"
            if basis == {"phases"}
            else "each side's own parts"
        )
        if d.decomposition_a.idle_scale is not None or d.decomposition_b.idle_scale is not None:
            how += "; idle scaled to the untraced steps, see the notes"
        _changes(
            out,
            f"What changed the mean step time: {d.total_delta_ms:+,.3f} ms ({how}; the rows add up to it)",
            d.explain,
            top,
        )
    _changes(out, "Phases", d.phases, top)
    _changes(out, f"Ops ({'self GPU time' if d.ops_basis == 'self_gpu' else 'self CPU time'})", d.ops, top, counts=True)
    _changes(out, "Kernels, copies and sets (GPU time)", d.kernels, top, counts=True)
    if d.op_links:
        out.print("\n[bold]Replaced GPU work, matched through the op that launched it[/bold]")
        t = _table("op", "A ms/step", "B ms/step", "vanished (A)", "new (B)")
        for link in d.op_links[:top]:
            t.add_row(
                _name(link.op),
                _v(link.a_ms),
                _v(link.b_ms),
                escape(_top_names(link.vanished)),
                escape(_top_names(link.new)),
            )
        out.print(t)
    if d.matching:
        out.print("\n[bold]Matching by name[/bold]")
        t = _table("table", "matched", "only in A", "only in B", "A time matched", "B time matched")
        for m in d.matching:
            t.add_row(
                m.table,
                str(m.matched),
                str(m.vanished),
                str(m.new),
                "-" if m.matched_a_pct is None else f"{m.matched_a_pct:.1f}%",
                "-" if m.matched_b_pct is None else f"{m.matched_b_pct:.1f}%",
            )
        out.print(t)
    _gpu(out, d)
    _advice(out, advice)
    for n in d.notes:
        out.print(f"note: {escape(n)}")


def _top_names(items: list[tuple[str, float]], k: int = 2) -> str:
    items = sorted(items, key=lambda x: -x[1])
    text = ", ".join(f"{n[:40]} ({v:.3f})" for n, v in items[:k])
    return text + (f" +{len(items) - k} more" if len(items) > k else "")


def _gpu(out: Console, d: ProfileDiff) -> None:
    rows = d.gpu.get("rows", [])
    mem = d.memory
    if (
        not rows
        and not d.counters
        and not mem.get("torch")
        and mem.get("peak_bytes_a") is None
        and mem.get("peak_bytes_b") is None
    ):
        return
    out.print("\n[bold]GPU[/bold]")
    t = _table("metric", "A", "B", "change")
    for r in rows:
        a, b = r["a"], r["b"]
        t.add_row(r["metric"], _v(a, 2), _v(b, 2), "-" if a is None or b is None else _d(b - a, 2))
    a, b = mem.get("peak_bytes_a"), mem.get("peak_bytes_b")
    if a is not None or b is not None:
        t.add_row(
            "memory peak (GB)",
            _v(None if a is None else a / 1e9, 2),
            _v(None if b is None else b / 1e9, 2),
            "-" if a is None or b is None else _d((b - a) / 1e9, 2),
        )
    for r in mem.get("torch", []):
        a, b = r["a"], r["b"]
        t.add_row(
            f"{r['metric']} peak (GB)",
            _v(None if a is None else a / 1e9, 2),
            _v(None if b is None else b / 1e9, 2),
            "-" if a is None or b is None else _d((b - a) / 1e9, 2),
        )
    for r in d.counters:
        a, b = r["a"], r["b"]
        t.add_row(f"counter {r['metric']} (mean)", _v(a, 1), _v(b, 1), "-" if a is None or b is None else _d(b - a, 1))
    out.print(t)


def _advice(out: Console, adv: dict[str, list[dict[str, Any]]]) -> None:
    if not adv:
        return
    out.print("\n[bold]Advice[/bold]")
    for f in adv.get("resolved", []):
        out.print(f"  gone in B: {escape(f['id'])}: {escape(f['title'])}")
    for f in adv.get("new", []):
        out.print(f"  new in B:  {escape(f['id'])}: {escape(f['title'])} (up to {_v(f['saving_ms'], 2)} ms/step)")
    for f in adv.get("both", []):
        out.print(
            f"  in both:   {escape(f['id'])}: saving up to {_v(f['saving_ms_a'], 2)} -> {_v(f['saving_ms'], 2)} ms/step"
        )
    if not any(adv.values()):
        out.print("  no findings in either profile")
