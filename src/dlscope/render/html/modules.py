"""The report's module section: the ``nn.Module`` tree with its GPU (or host) time per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import blocks

if TYPE_CHECKING:
    from ...analysis.measures.modules import ModuleRow, ModuleView

MAX_ROWS = 60  # the tree's first rows (tree order: a model's top levels first)


def modules_section(view: ModuleView | None) -> str:
    if view is None:
        return blocks.section(
            "modules",
            "Modules",
            blocks.note(
                "No module calls in this profile: `dlscope profile` records them for a PyTorch program in the "
                "traced steps after the warm-up."
            ),
        )
    gpu = view.fwd_bwd_gpu_ms is not None
    total = (view.fwd_bwd_gpu_ms if gpu else view.fwd_bwd_ops_ms) or 0.0

    def share(r: ModuleRow) -> float | None:
        v = r.gpu_ms if gpu else r.ops_ms
        return None if v is None or not total else 100.0 * v / total

    def ms(v: float | None) -> str:
        return blocks.num(v, 3)

    rows = []
    for r in view.rows[:MAX_ROWS] if len(view.rows) <= MAX_ROWS else _cut(view.rows):
        cells = [r.type, f"{r.instances:,}" if r.part == "module" else ""]
        if gpu:
            cells += [ms(r.fwd_gpu_ms), ms(r.bwd_gpu_ms), blocks.num(r.kernels, 1)]
        cells += [ms(r.fwd_host_ms), ms(r.bwd_host_ms), blocks.pct(share(r))]
        rows.append(("\u2003" * r.depth + r.module, cells, share(r)))
    headers = ["module", "class", "instances"]
    if gpu:
        headers += ["fwd GPU ms", "bwd GPU ms", "kernels"]
    headers += ["fwd host ms", "bwd host ms", "% of fwd+bwd " + ("kernel time" if gpu else "op time")]
    cover = view.gpu_coverage_pct if gpu else view.ops_coverage_pct
    intro = (
        f"Per step, over {view.steps} traced step(s). A module's figures include its descendants'; repeated "
        "blocks are one row (h.*.attn). Backward time is the module's whose forward made it. "
        f"Modules hold {blocks.pct(cover)} of the forward and backward "
        + ("kernel time" if gpu else "host op time")
        + "; the optimizer's work is shown apart."
    )
    return blocks.section("modules", "Modules", blocks.name_table(headers, rows, cls="names modules"), intro)


def _cut(rows: tuple[ModuleRow, ...]) -> list[ModuleRow]:
    """The first module rows and every row that is not a module (the optimizer, outside modules)."""
    mods = [r for r in rows if r.part == "module"][: MAX_ROWS - 3]
    return mods + [r for r in rows if r.part != "module"]
