"""The module view on a GPU (issue 42's acceptance): a GPT-2-124M-class and a ResNet-like CNN training
step (``tests/programs/module_models.py`` with ``MODULE_MODELS_SIZE=large``) profiled by
``dlscope profile`` in the default mode, then

1. coverage: the share of the forward and backward kernel time the modules hold (>= 95% wanted),
   the optimizer's kernels apart, and the ``modules`` report's first rows;
2. the advice's module sentence, when the fp32 matrix-math finding fires (TF32 is off by default);
3. overhead: the program bare and under ``dlscope profile``, alternated ``--rounds`` times; the
   median step of the untraced steps (the hooks never run there) and of the traced steps after the
   warm-up (where they do, beside torch.profiler), profiled over bare;
4. the hooks' cost per module call on this host (``bench/hook_costs.py --modules-only --device cuda``).

    python bench/programs/module_view_gpu.py [--steps 30] [--rounds 3] [-o DIR]

Prints one JSON summary per model and writes ``DIR/module_view_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
PROGRAM = ROOT / "tests" / "programs" / "module_models.py"
TRACED = range(1, 6)  # the default mode's traced steps after the warm-up (capture.torch.DEFAULT_DETAIL_STEPS)


DEVICE, SIZE = "cuda", "large"  # --device, --size (cpu and small: a dry run of this script on any machine)


def env(times: Path | None = None) -> dict[str, str]:
    e = dict(os.environ, MODULE_MODELS_SIZE=SIZE, MODULE_MODELS_DEVICE=DEVICE)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), e.get("PYTHONPATH", "")) if p)
    if times is not None:
        e["MODULE_MODELS_TIMES"] = str(times)
    e.pop("DLSCOPE_SESSION", None)
    return e


def profile(kind: str, steps: int, out: Path, times: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "dlscope", "profile", "-f", "-o", str(out), "--quiet", "--"]
    cmd += [sys.executable, str(PROGRAM), kind, str(steps)]
    subprocess.run(cmd, check=True, env=env(times), stdout=subprocess.DEVNULL)


def bare(kind: str, steps: int, times: Path) -> None:
    cmd = [sys.executable, str(PROGRAM), kind, str(steps)]
    subprocess.run(cmd, check=True, env=env(times), stdout=subprocess.DEVNULL)


KINDS = {
    "aten::linear": "Linear",
    "aten::layer_norm": "LayerNorm",
    "aten::embedding": "Embedding",
    "aten::gelu": "GELU",
    "aten::conv2d": "Conv2d",
    "aten::batch_norm": "BatchNorm2d",
}


def alignment(data) -> dict:
    """The module calls (dlscope's clock) against the ops (Kineto's, shifted onto it): the share of
    the traced steps' linear, norm, embedding, GELU and convolution ops that lie in a call of their
    own class (100% when the clocks line up; an op seen in its parent instead means they do not)."""
    calls = data.con.execute("SELECT tid, start_ns, end_ns, type FROM module_calls").fetchall()
    names = ", ".join(f"'{k}'" for k in KINDS)
    ops = data.con.execute(
        f"""SELECT tid, start_ns, end_ns, name FROM ops WHERE depth = 0 AND name IN ({names})
            AND step IN (SELECT step FROM module_calls)"""
    ).fetchall()
    ok = 0
    for tid, s, e, name in ops:
        hold = [c for c in calls if c[0] == tid and c[1] <= s and e <= c[2]]
        ok += bool(hold) and max(hold, key=lambda c: c[1])[3] == KINDS[name]
    return {"ops": len(ops), "in_own_class_pct": 100.0 * ok / len(ops) if ops else None}


def coverage(path: Path) -> dict:
    from dlscope.analysis import REPORTS
    from dlscope.analysis.core.context import ProfileData
    from dlscope.analysis.measures.modules import module_view
    from dlscope.application.advise import advise

    data = ProfileData.open(path)
    view = module_view(data)
    if view is None:
        return {"error": "no module calls", "torch": data.meta.collectors.get("torch")}
    opt = next(r for r in view.rows if r.part == "optimizer")
    rows = REPORTS["modules"].compute(data).table.to_pylist()
    texts = [getattr(f.evidence, "text", str(f.evidence)) for f in advise(data).findings]
    return {
        "steps": view.steps,
        "gpu_coverage_pct": view.gpu_coverage_pct,
        "fwd_bwd_gpu_ms_per_step": view.fwd_bwd_gpu_ms,
        "optimizer_gpu_ms_per_step": opt.gpu_ms,
        "optimizer_kernels_per_step": opt.kernels,
        "ops_coverage_pct": view.ops_coverage_pct,
        "rows": [
            {k: r.get(k) for k in ("module", "type", "instances", "fwd_gpu_ms", "bwd_gpu_ms", "gpu_pct", "ops_pct")}
            for r in rows[:25]
        ],
        "advice_with_modules": [t[:400] for t in texts if "% of it in" in t or "largest part" in t],
        "alignment": alignment(data),
        "acceptance_95pct": (view.gpu_coverage_pct or 0) >= 95,
    }


def overhead(kind: str, steps: int, rounds: int, tmp: Path) -> dict:
    """Median step (ns) per round, bare and profiled, the rounds' order alternating."""
    out: dict[str, list[float]] = {"bare_untraced": [], "prof_untraced": [], "bare_traced": [], "prof_traced": []}
    for r in range(rounds):
        for mode in ("bare", "prof") if r % 2 == 0 else ("prof", "bare"):
            times = tmp / f"{kind}_{mode}_{r}.json"
            if mode == "bare":
                bare(kind, steps, times)
            else:
                profile(kind, steps, tmp / f"{kind}_{r}.dlscope", times)
            t = json.loads(times.read_text())
            # step i of the program is dlscope's step i (its optimizer steps): 0 warm-up, 1-5 traced,
            # 6 pays for the trace's write; the rest untraced
            out[f"{mode}_traced"].append(statistics.median(t[i] for i in TRACED))
            out[f"{mode}_untraced"].append(statistics.median(t[8:]))
    med = {k: statistics.median(v) for k, v in out.items()}
    return {
        "rounds": out,
        "untraced_profiled_over_bare": med["prof_untraced"] / med["bare_untraced"],
        "traced_profiled_over_bare": med["prof_traced"] / med["bare_traced"],
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--device", default=DEVICE)
    ap.add_argument("--size", default=SIZE, choices=("large", "small"))
    ap.add_argument("-o", "--output", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    globals().update(DEVICE=a.device, SIZE=a.size)
    outdir = Path(a.output)
    outdir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    result: dict = {}
    for kind in a.models.split(","):
        path = outdir / f"module_view_{kind}.dlscope"
        profile(kind, a.steps, path)
        result[kind] = {"coverage": coverage(path)}
        print(kind, json.dumps(result[kind]["coverage"], default=str)[:3000], flush=True)
        if a.rounds:
            result[kind]["overhead"] = overhead(kind, a.steps, a.rounds, tmp)
            print(kind, "overhead", json.dumps(result[kind]["overhead"]), flush=True)
    cost = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "hook_costs.py"), "--modules-only", "--device", DEVICE],
        capture_output=True,
        text=True,
        env=env(),
    )
    result["hook_cost"] = cost.stdout.strip().splitlines()
    print("\n".join(result["hook_cost"]))
    (outdir / "module_view_gpu.json").write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
