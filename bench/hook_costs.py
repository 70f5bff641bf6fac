"""Benchmark: what dlscope's phase hooks (capture/torch_hooks.py) cost a training step, and the
two GPU facts the replay stands on (the launch queue's depth, an unblocked launch's cost).

1. Hooks: one process trains a small model (a launch-bound MLP: the worst case, many module
   calls and optimizer ops per ms) in blocks of steps, alternating blocks with the hooks on
   (a recording session holding only the hooks collector) and off; the median of the paired
   blocks' differences is the hooks' cost per step. torch.profiler (CPU+CUDA activities, as
   dlscope's traced window) is timed after them, for scale.
2. Module hooks (``--modules-only``; capture/module_calls.py, the traced steps only): a forward
   through a chain of tiny modules with and without the global module hooks, alone and under
   torch.profiler (as in the traced window); the difference per module call, and what naming the
   calls costs when the window ends.
3. Launch queue (CUDA only): a long kernel (``torch.cuda._sleep``) is queued, then tiny kernels
   are launched one by one, each call timed; the first call that waits (over 20x the median)
   tells how many launches the queue held.

    python bench/hook_costs.py [--device cuda] [--blocks 8] [--steps 200] -o results.json
    python bench/hook_costs.py --modules-only [-o results.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from dlscope.capture.base import Settings  # noqa: E402
from dlscope.capture.live_status import LiveStatus  # noqa: E402
from dlscope.capture.module_calls import ModuleCallRecorder  # noqa: E402
from dlscope.capture.session import Session  # noqa: E402
from dlscope.capture.torch_hooks import TorchPhaseHooks  # noqa: E402


def make(device: str):
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(256, 256), nn.LayerNorm(256), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(256, 10)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
    return model, opt, loader


def block(model, opt, loader, steps: int, device: str) -> float:
    it = iter(loader)
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        x, y = x.to(device), y.to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss.item()
    return (time.perf_counter() - t0) / steps * 1e6  # us per step


def hooks_cost(device: str, blocks: int, steps: int) -> dict:
    """Blocks alternate off/hooks in pairs (order flipped every pair); torch.profiler runs last,
    since CUPTI slows launches for a while after it detaches. The cost is the median of the
    pairs' differences, with a bootstrap 95% interval."""
    model, opt, loader = make(device)
    block(model, opt, loader, 20, device)  # warm up
    times: dict[str, list[float]] = {"off": [], "hooks": [], "hooks_no_gpu_marks": [], "torch.profiler": []}
    tmp = Path(tempfile.mkdtemp())
    modes = ["off", "hooks", "hooks_no_gpu_marks"]
    for b in range(blocks):
        for mode in modes[b % 3 :] + modes[: b % 3]:  # rotated, so that drifts hit every mode alike
            if mode.startswith("hooks"):
                settings = Settings(phase_gpu=mode != "hooks_no_gpu_marks")
                s = Session(tmp / f"h{b}{mode}.dlscope", settings, collectors=[TorchPhaseHooks]).start()
                block(model, opt, loader, 3, device)
                s.step()  # the first boundary after a forward narrows the module hooks to the outermost modules
                times[mode].append(block(model, opt, loader, steps, device))
                s.stop()
            else:
                times[mode].append(block(model, opt, loader, steps, device))
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    for _ in range(max(2, blocks // 4)):
        with torch.profiler.profile(activities=acts):
            times["torch.profiler"].append(block(model, opt, loader, steps, device))
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "device": device,
        "steps_per_block": steps,
        "blocks": blocks,
        "us_per_step": times,
        "median_us_per_step": med,
        "torch_profiler_cost_pct": 100 * (med["torch.profiler"] / med["off"] - 1),
    }
    rng = random.Random(0)
    # hooks (with the CUDA-event GPU marks on a GPU) against off, and the marks alone
    for label, on, off in (("hooks", "hooks", "off"), ("gpu_marks", "hooks", "hooks_no_gpu_marks")):
        diffs = [h - o for h, o in zip(times[on], times[off])]
        boot = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(2000))
        out[f"{label}_cost_us_per_step"] = statistics.median(diffs)
        out[f"{label}_cost_interval_us"] = [boot[50], boot[1949]]
        out[f"{label}_cost_pct"] = 100 * statistics.median(diffs) / med["off"]
    return out


def per_call_costs(n: int = 3000, reps: int = 7) -> dict:
    """What each hook adds to one call of what it hooks, on tiny CPU work (so the hook's own
    cost is not lost in the work's noise): best of ``reps`` runs of ``n`` calls, hooks on minus
    off. The per-step cost of the hooks is about the sum (one call of each per step)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    data = torch.utils.data.TensorDataset(torch.randn(1 << 16, 8))
    loss = model(x).sum()

    def forward() -> None:
        model(x)

    def backward() -> None:
        model(x).sum().backward()

    def step() -> None:
        opt.step()

    it = iter(torch.utils.data.DataLoader(data, batch_size=None))

    def fetch() -> None:
        next(it)

    def best(fn) -> float:
        out = []
        for _ in range(reps):
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            out.append((time.perf_counter_ns() - t) / n)
        return min(out)

    del loss
    tmp = Path(tempfile.mkdtemp())
    res = {}
    # the live line's per-step cost in the program (capture/live_status.py): a step boundary with
    # and without it (its file is written by the flusher thread, once a second)
    for label, cols, live in (("step boundary", [], False), ("step boundary, live line on", [LiveStatus], True)):
        s = Session(tmp / f"{len(res)}.dlscope", Settings(live=live), collectors=cols).start()
        res[label] = {"ns": best(s.step)}
        s.stop()
    res["live line"] = {
        "off_ns": res["step boundary"]["ns"],
        "hooks_ns": res["step boundary, live line on"]["ns"],
        "added_ns": res["step boundary, live line on"]["ns"] - res["step boundary"]["ns"],
    }
    del res["step boundary"], res["step boundary, live line on"]
    for name, fn in (
        ("forward", forward),
        ("backward (forward included)", backward),
        ("optimizer", step),
        ("dataloader", fetch),
    ):
        off = best(fn)
        s = Session(tmp / f"{name[:4]}.dlscope", Settings(), collectors=[TorchPhaseHooks]).start()
        forward()
        s.step()  # narrows the module hooks to the outermost module
        on = best(fn)
        s.stop()
        res[name] = {"off_ns": off, "hooks_ns": on, "added_ns": on - off}
    return res


def module_hook_costs(modules: int = 32, n: int = 1000, reps: int = 7, device: str = "cpu") -> dict:
    """What the module hooks add to one module call: best of ``reps`` runs of ``n`` forwards through
    a Sequential of ``modules`` tiny Linear layers (``modules + 1`` calls each), hooks on minus off,
    divided by the calls; alone and under torch.profiler (the traced window runs both). Then what
    naming the window's calls costs (``remove()``), per call."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(modules)]).to(device)
    x = torch.randn(4, 8, device=device)
    calls = modules + 1

    def forward() -> None:
        model(x)

    def best(fn) -> float:
        out = []
        for _ in range(reps):
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            if device == "cuda":
                torch.cuda.synchronize()
            out.append((time.perf_counter_ns() - t) / n)
        return min(out)

    res: dict = {"modules_per_forward": calls, "device": device}
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device == "cuda" else [])
    for label, profiled in (("alone", False), ("under torch.profiler", True)):
        prof = torch.profiler.profile(activities=acts) if profiled else None
        if prof is not None:
            prof.start()
        forward()
        off = best(forward)
        rec = ModuleCallRecorder(torch, time.perf_counter_ns, lambda: False)
        rec.install()
        on = best(forward)
        t = time.perf_counter_ns()
        named = rec.remove()
        naming = time.perf_counter_ns() - t
        if prof is not None:
            prof.stop()
        recorded = len(named["start"])
        res[label] = {
            "forward_off_ns": off,
            "forward_hooks_ns": on,
            "added_ns_per_call": (on - off) / calls,
            "naming_ns_per_call": naming / max(recorded, 1),
            "calls_recorded": recorded,
        }
    return res


def gpu_mark_cost(n: int = 3000, reps: int = 5) -> dict:
    """What one phase's GPU marks cost the host (CUDA only): a begin/end pair of CUDA events and
    the poll that reads them back, around a tiny kernel, against the kernel alone; best of reps."""
    from dlscope.capture.phase_events import PhaseGpuClock, TorchEvents

    x = torch.zeros(1, device="cuda")
    clock = PhaseGpuClock(TorchEvents(torch), ("forward",))

    def bare() -> None:
        x.add_(1)

    def marked() -> None:
        tok = clock.begin("forward")
        x.add_(1)
        clock.end(tok)
        clock.poll()

    def best(fn) -> float:
        out = []
        for _ in range(reps):
            torch.cuda.synchronize()
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            out.append((time.perf_counter_ns() - t) / n)
        return min(out)

    bare_ns, marked_ns = best(bare), best(marked)
    return {
        "bare_ns": bare_ns,
        "marked_ns": marked_ns,
        "added_ns": marked_ns - bare_ns,
        "marks": clock.marks,
        "failed": clock.failed,
    }


def launch_queue(n: int = 4096) -> dict:
    x = torch.zeros(1, device="cuda")
    for _ in range(100):
        x.add_(1)
    torch.cuda.synchronize()
    out = {}
    for trial in range(3):
        torch.cuda._sleep(int(2e9))  # about a second of GPU time at ~2 GHz: the queue fills behind it
        costs = []
        for _ in range(n):
            t = time.perf_counter_ns()
            x.add_(1)
            costs.append(time.perf_counter_ns() - t)
        torch.cuda.synchronize()
        med = statistics.median(costs[:256])
        first_wait = next((i for i, c in enumerate(costs) if c > 20 * med), None)
        out[f"trial{trial}"] = {
            "median_launch_ns": med,
            "p90_launch_ns": statistics.quantiles(costs[:256], n=10)[-1],
            "launches_before_first_wait": first_wait,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("-o", "--output", default="")
    ap.add_argument("--marks-only", action="store_true", help="only the GPU marks' cost (CUDA)")
    ap.add_argument("--modules-only", action="store_true", help="only the module hooks' cost per call")
    a = ap.parse_args()
    if a.modules_only:
        r = {"torch": torch.__version__, "module_hooks": module_hook_costs(device=a.device)}
        for label, v in r["module_hooks"].items():
            if isinstance(v, dict):
                print(
                    f"module hooks, {label}: +{v['added_ns_per_call'] / 1e3:.2f} us per module call "
                    f"(forward of {r['module_hooks']['modules_per_forward']} calls {v['forward_off_ns'] / 1e3:.1f} -> "
                    f"{v['forward_hooks_ns'] / 1e3:.1f} us); naming at the window's end "
                    f"{v['naming_ns_per_call'] / 1e3:.2f} us per call"
                )
        if a.output:
            Path(a.output).write_text(json.dumps(r, indent=1))
        return 0
    if a.marks_only:
        r = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "gpu_mark": gpu_mark_cost()}
        print("one phase's GPU marks:", json.dumps(r["gpu_mark"]))
        if a.output:
            Path(a.output).write_text(json.dumps(r, indent=1))
        return 0
    res = {"torch": torch.__version__, "per_call": per_call_costs(), "hooks": hooks_cost(a.device, a.blocks, a.steps)}
    if a.device == "cuda":
        res["gpu"] = torch.cuda.get_device_name(0)
        res["launch_queue"] = launch_queue()
        res["gpu_mark"] = gpu_mark_cost()
    text = json.dumps(res, indent=1)
    if a.output:
        Path(a.output).write_text(text)
    h = res["hooks"]
    for name, r in res["per_call"].items():
        print(f"  {name}: {r['off_ns'] / 1e3:.2f} us per call, hooks add {r['added_ns'] / 1e3:+.2f} us")
    lo, hi = h["hooks_cost_interval_us"]
    glo, ghi = h["gpu_marks_cost_interval_us"]
    print(
        f"{a.device}: off {h['median_us_per_step']['off']:.1f} us/step, hooks {h['hooks_cost_us_per_step']:+.1f} us"
        f" (95% interval {lo:+.1f}..{hi:+.1f}; {h['hooks_cost_pct']:+.2f}%), of which GPU marks"
        f" {h['gpu_marks_cost_us_per_step']:+.1f} us ({glo:+.1f}..{ghi:+.1f}); torch.profiler"
        f" {h['torch_profiler_cost_pct']:+.1f}%"
    )
    if "gpu_mark" in res:
        print("one phase's GPU marks:", json.dumps(res["gpu_mark"]))
    if "launch_queue" in res:
        print(json.dumps(res["launch_queue"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
