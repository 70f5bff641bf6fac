"""GPU benchmark and checks for the PyTorch layer (issue 3). Runs on the GPU machine:

    python3 bench/gpu_torch_layer.py            (results under $OUT, table at the end)

1. Step-time overhead, side by side in one process, many alternated blocks, medians: no
   profiler, torch.profiler (CPU+CUDA, CUDA only, CPU only), dlscope default and full; on a
   GPU-bound ResNet-50 bf16 training step (batch 128, channels_last) and on a launch-bound
   small-MLP step. Also: the time dlscope's stop+finalize takes per 100k events.
2. An unmodified ResNet-50 training script under `dlscope profile`: all four layers present and
   linked (kernels -> launching API call -> op), the summary saved.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
import dlscope  # noqa: E402
from dlscope.analysis.core.context import ProfileData  # noqa: E402

OUT = Path(os.environ.get("OUT", "/tmp/out"))
OUT.mkdir(parents=True, exist_ok=True)
ROUNDS = int(os.environ.get("ROUNDS", "5"))
results: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "rounds": ROUNDS}


def sync() -> None:
    torch.cuda.synchronize()


def resnet_step():
    import torchvision

    m = torchvision.models.resnet50(weights=None).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (128,), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def mlp_step():
    m = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(12)]).cuda()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    x = torch.randn(16, 256, device="cuda")

    def step():
        loss = m(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def run_block(step, warm: int, n: int, on_step=None) -> list[float]:
    for _ in range(warm):
        step()
        if on_step:
            on_step()
    ts = []
    for _ in range(n):
        sync()
        t = time.perf_counter()
        step()
        sync()
        ts.append(time.perf_counter() - t)
        if on_step:
            on_step()
    return ts


def configs():
    from torch.profiler import ProfilerActivity, profile

    cpu, cuda = ProfilerActivity.CPU, ProfilerActivity.CUDA

    def tp(acts):
        def block(step, warm, n):
            with profile(activities=acts):
                return run_block(step, warm, n), {}

        return block

    def dl(mode):
        def block(step, warm, n):
            d = Path(tempfile.mkdtemp()) / "b.dlscope"
            prof = dlscope.profile(d, mode=mode, cupti="off")
            prof.start()
            ts = run_block(step, warm, n, on_step=prof.step)
            t = time.perf_counter()
            prof.stop()
            stop_s = time.perf_counter() - t
            meta = json.loads((d / "meta.json").read_text())
            rows = meta["table_rows"]
            events = sum(v for k, v in rows.items() if k != "strings")
            data = ProfileData.open(d)
            traced = {s: bool(tr) for s, tr in data.con.execute("SELECT step, traced FROM steps").fetchall()}
            flags = [traced.get(warm + i, True) for i in range(n)]  # step i of the block is dlscope step warm+i
            export_s = meta["collectors"].get("torch", {}).get("settings", {}).get("export_s")
            shutil.rmtree(d.parent, ignore_errors=True)
            return ts, {
                "stop_finalize_s": stop_s,
                "events": events,
                "traced": flags,
                "timings": meta.get("timings_s", {}),
                "kineto_export_s": export_s,
            }

        return block

    return {
        "none": lambda s, w, n: (run_block(s, w, n), {}),
        "torch.profiler cpu+cuda": tp([cpu, cuda]),
        "torch.profiler cuda": tp([cuda]),
        "torch.profiler cpu": tp([cpu]),
        "dlscope default": dl("default"),
        "dlscope full": dl("full"),
    }


def overhead(name: str, step, warm: int, n: int) -> dict:
    cfgs = configs()
    for fn in cfgs.values():  # one untimed round: CUPTI and allocator warm-up
        fn(step, warm, 3)
    per: dict[str, list[float]] = {k: [] for k in cfgs}
    extra: dict[str, list[dict]] = {k: [] for k in cfgs}
    block_times: dict[str, list[list[float]]] = {k: [] for k in cfgs}
    names = list(cfgs)
    for r in range(ROUNDS):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            ts, info = cfgs[k](step, warm, n)
            per[k].append(statistics.median(ts) * 1e3)
            extra[k].append(info)
            block_times[k].append(ts)
    base = statistics.median(per["none"])
    out = {}
    for k in names:
        med = statistics.median(per[k])
        out[k] = {"median_ms": med, "overhead_pct": 100 * (med / base - 1), "rounds_ms": per[k]}
        fin = [e for e in extra[k] if e]
        if fin:
            out[k]["stop_finalize_s"] = statistics.median(e["stop_finalize_s"] for e in fin)
            out[k]["events"] = statistics.median(e["events"] for e in fin)
            out[k]["finalize_s_per_100k_events"] = out[k]["stop_finalize_s"] / max(out[k]["events"], 1) * 1e5
            out[k]["kineto_export_s"] = statistics.median(e["kineto_export_s"] or 0 for e in fin)
            out[k]["dlscope_finalize_s_per_100k_events"] = (
                (out[k]["stop_finalize_s"] - out[k]["kineto_export_s"]) / max(out[k]["events"], 1) * 1e5
            )
            out[k]["timings_s"] = fin[-1]["timings"]
            out[k]["traced_steps_per_block"] = sum(fin[-1]["traced"])
            for label, want in (("untraced", False), ("traced", True)):
                rounds = [
                    statistics.median([t for t, f in zip(ts, e["traced"]) if f == want]) * 1e3
                    for ts, e in zip(block_times[k], fin)
                    if any(f == want for f in e["traced"])
                ]
                if rounds:
                    med = statistics.median(rounds)
                    out[k][f"{label}_median_ms"] = med
                    out[k][f"{label}_overhead_pct"] = 100 * (med / base - 1)
    tp = out["torch.profiler cpu+cuda"]["overhead_pct"]
    for k in ("dlscope default", "dlscope full"):
        out[k]["ratio_to_torch_profiler_overhead"] = out[k]["overhead_pct"] / tp if tp > 0 else None
    print(f"\n== {name}")
    for k, v in out.items():
        print(
            f"{k:26s} {v['median_ms']:9.3f} ms  {v['overhead_pct']:+6.2f}%"
            + (f"  untraced {v['untraced_overhead_pct']:+.2f}%" if "untraced_overhead_pct" in v else "")
            + (f"  traced {v['traced_overhead_pct']:+.2f}%" if "traced_overhead_pct" in v else "")
            + (
                f"  stop+finalize {v['stop_finalize_s']:.2f}s for {v['events']:.0f} events"
                f" (Kineto export {v['kineto_export_s']:.2f}s)"
                if "events" in v
                else ""
            )
        )
    return out


def unmodified_resnet() -> dict:
    out = OUT / "resnet_unmodified.dlscope"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    t = time.time()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "-o",
            str(out),
            "--batch-size",
            "64",
            "--",
            sys.executable,
            str(REPO / "bench/programs/resnet_unmodified.py"),
            "12",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.time() - t
    (OUT / "resnet_unmodified_summary.txt").write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    print(r.stdout[-3000:])
    res: dict = {"returncode": r.returncode, "wall_s": wall}
    if r.returncode:
        print(r.stderr[-3000:])
        return res
    data = ProfileData.open(out)
    con = data.con
    q = lambda s: con.execute(s).fetchall()  # noqa: E731
    res["rows"] = data.meta.table_rows
    res["kernels_with_launch"] = q("""SELECT count(*) FILTER (WHERE a.correlation_id IS NOT NULL), count(*)
        FROM kernels k LEFT JOIN (SELECT DISTINCT rank, correlation_id FROM api) a USING (rank, correlation_id)""")[0]
    res["kernels_with_op"] = q("""SELECT count(*) FILTER (WHERE o.external_id IS NOT NULL), count(*)
        FROM kernels k LEFT JOIN (SELECT DISTINCT rank, external_id FROM ops) o USING (rank, external_id)""")[0]
    res["steps"] = q("SELECT count(*), min(source) FROM steps")[0]
    res["phases"] = q("SELECT name, count(*) FROM phases WHERE source = 'derived' GROUP BY 1 ORDER BY 1")
    res["collectors"] = {k: v.__dict__ for k, v in data.meta.collectors.items()}
    res["summary_json"] = subprocess.run(
        [sys.executable, "-m", "dlscope", "summary", str(out), "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return res


def demo_profile() -> dict:
    """ResNet-50 with phases and real input-pipeline problems: the profile bundled for the demo."""
    work = Path(tempfile.mkdtemp())
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlscope",
            "profile",
            "-o",
            str(work / "h100_resnet50.dlscope"),
            "--batch-size",
            "64",
            "--",
            sys.executable,
            str(REPO / "bench/programs/resnet_phases.py"),
            "16",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
    )
    (OUT / "demo_summary.txt").write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    print(r.stdout[-2500:])
    if r.returncode == 0:
        subprocess.run(
            ["tar", "czf", str(OUT / "h100_resnet50.dlscope.tgz"), "-C", str(work), "h100_resnet50.dlscope"], check=True
        )
    return {"returncode": r.returncode}


if __name__ == "__main__":
    torch.backends.cudnn.benchmark = True
    results["demo_profile"] = demo_profile()
    results["unmodified_resnet"] = unmodified_resnet()
    results["resnet50_bf16_b128"] = overhead("ResNet-50 bf16 batch 128 (GPU-bound)", resnet_step(), 3, 15)
    results["mlp_small"] = overhead("12-layer MLP batch 16 (launch-bound)", mlp_step(), 5, 40)
    (OUT / "gpu_torch_layer.json").write_text(json.dumps(results, indent=1, default=str))
    print("\nunmodified resnet:", {k: v for k, v in results["unmodified_resnet"].items() if k != "summary_json"})
    shutil.rmtree(OUT / "resnet_unmodified.dlscope", ignore_errors=True)  # only 8 files come back
