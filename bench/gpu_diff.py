"""GPU validation of `dlscope diff` and `dlscope check` (issue 12), in one self-checking script.

Run on a machine with an NVIDIA GPU, from the repository root (dlscope is taken from ./src):

    OUT=/some/dir python3 bench/gpu_diff.py

Profiles bench/programs/diff_model.py four times with `python3 -m dlscope profile` (default
mode: every step timed, ops and kernels traced in the first steps): ResNet-18 at batch 4 and at
batch 512, and an MLP eager and under torch.compile. Then `dlscope diff` on each pair (text,
JSON, HTML) and `dlscope check`, and checks that the diff says what changed:

* batch 4 -> 512: step time up and significant; samples/s up (ratio > 1) and the time per sample
  down significantly; the step-time rows add up to the change of the mean step time; most GPU
  time matched by kernel name (same model, same kernels mostly).
* eager -> compiled: fewer kernels per step; Triton kernels among the new GPU work; aten
  elementwise kernels among the vanished; the rows add up.
* check: batch 512 against batch 4 on step_p50 exits 1 (a real, significant step-time
  regression) while throughput does not regress, and mem_peak (NVML) regresses;
  a profile against itself exits 0; against its
  own summary JSON exits 0; a missing baseline exits 2 with one line on stderr.

Writes into $OUT: gpu_diff.json (checks and numbers), gpu_diff.log, diff_batch.txt,
diff_compile.txt, diff_batch.html, diff_compile.html, diffs.json (both diffs' JSON) and
profiles.tar.gz (the four profiles, when small enough). Never crashes as a whole: each part's
error is recorded. About 3 minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or "/tmp/dlscope-gpu-diff")
WORK = Path(tempfile.mkdtemp(prefix="dlscope-diff-"))
PROGRAM = REPO / "bench" / "programs" / "diff_model.py"
BUDGET_S = float(os.environ.get("DIFF_BUDGET_S", "225"))  # the lead's limit: 4 minutes
START = time.monotonic()
RESULTS: dict[str, Any] = {"checks": {}, "data": {}, "errors": {}}
LOG: Any = None

RUNS = {  # name -> (model, batch, steps, compile)
    "resnet18_b4": ("resnet18", 4, 60, False),
    "resnet18_b512": ("resnet18", 512, 30, False),
    "mlp_eager": ("mlp", 256, 80, False),
    "mlp_compiled": ("mlp", 256, 80, True),
}
RESERVE = {"resnet18_b4": 150.0, "resnet18_b512": 130.0, "mlp_eager": 70.0, "mlp_compiled": 50.0}
# DIFF_DEVICE=cpu: a smoke test of this script's plumbing on a machine without a GPU (the MLP in
# place of ResNet-18, no torch.compile); its checks about kernels then fail or skip by design
DEVICE = os.environ.get("DIFF_DEVICE", "cuda")
if DEVICE == "cpu":
    RUNS = {
        "resnet18_b4": ("mlp", 4, 30, False),
        "resnet18_b512": ("mlp", 256, 30, False),
        "mlp_eager": ("mlp", 64, 30, False),
        "mlp_compiled": ("mlp", 64, 30, False),
    }


def log(*parts: Any) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + "\n")
        LOG.flush()


def check(name: str, ok: bool | None, detail: str) -> None:
    status = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    RESULTS["checks"][name] = {"status": status, "detail": detail}
    log(f"[{status}] {name}: {detail}")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (e.get("PYTHONPATH", ""), str(REPO / "src")) if p)
    e["PYTHONUNBUFFERED"] = "1"
    e.pop("DLSCOPE_SESSION", None)
    return e


def left() -> float:
    return BUDGET_S - (time.monotonic() - START)


def dlscope(*args: str, timeout: float = 120, reserve: float = 0.0) -> subprocess.CompletedProcess[str]:
    """Run the CLI; on timeout its whole process group goes (the profiled program too, so that
    it does not hold the GPU through the rest). ``reserve``: seconds of the budget to leave."""
    cmd = [sys.executable, "-m", "dlscope", *args]
    t0 = time.monotonic()
    limit = max(5.0, min(timeout, left() - reserve))
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=WORK, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.communicate(timeout=10)
                break
            except subprocess.TimeoutExpired:
                continue
        log(f"$ dlscope {' '.join(args)}  -> killed after {limit:.0f} s")
        raise
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    log(f"$ dlscope {' '.join(args)}  -> rc {p.returncode} in {time.monotonic() - t0:.1f} s")
    if p.stderr.strip():
        log("  stderr:", p.stderr.strip()[-1500:])
    return p


def profile(name: str) -> Path | None:
    model, batch, steps, comp = RUNS[name]
    out = WORK / f"{name}.dlscope"
    prog = [
        sys.executable,
        str(PROGRAM),
        "--model",
        model,
        "--batch",
        str(batch),
        "--steps",
        str(steps),
        "--device",
        DEVICE,
    ]
    if comp:
        prog.append("--compile")
    # leave time for the diffs and checks of this pair (and, for the first pair, the second one)
    p = dlscope("profile", "-o", str(out), "--batch-size", str(batch), "--", *prog, timeout=100, reserve=RESERVE[name])
    RESULTS["data"][f"profile_{name}_rc"] = p.returncode
    if p.returncode != 0 or not out.exists():
        RESULTS["errors"][f"profile_{name}"] = p.stdout[-2000:] + p.stderr[-2000:]
        return None
    return out


def part(name: str, fn: Any, *args: Any) -> Any:
    if left() < 10:
        check(name, None, "skipped: out of time")
        return None
    try:
        return fn(*args)
    except Exception as e:  # one part failing must not lose the others
        RESULTS["errors"][name] = traceback.format_exc()[-3000:]
        check(name, False, f"error: {e.__class__.__name__}: {e}")
        return None


def run_diff(tag: str, a: Path, b: Path) -> dict[str, Any] | None:
    p = dlscope("diff", str(a), str(b), "--top", "15")
    (OUT / f"diff_{tag}.txt").write_text(p.stdout + ("\n[stderr]\n" + p.stderr if p.stderr else ""))
    j = dlscope("diff", str(a), str(b), "--format", "json", "--no-advice")
    h = dlscope("diff", str(a), str(b), "--format", "html", "-o", str(OUT / f"diff_{tag}.html"), "--no-advice")
    check(
        f"{tag}_runs",
        p.returncode == 0 and j.returncode == 0 and h.returncode == 0,
        f"text rc {p.returncode}, json rc {j.returncode}, html rc {h.returncode}",
    )
    if j.returncode != 0:
        return None
    d = json.loads(j.stdout)
    rows = sum(r["delta"] for r in d["explain"])
    total = d["total_delta_ms"]
    ok = total is not None and abs(rows - total) <= 0.05 * abs(total) + 1e-6
    check(f"{tag}_rows_add_up", ok, f"rows sum {rows:+.4f} ms vs mean step change {total:+.4f} ms")
    RESULTS["data"][f"{tag}_step"] = d["step_time"]
    RESULTS["data"][f"{tag}_throughput"] = d["throughput"]
    RESULTS["data"][f"{tag}_matching"] = d["matching"]
    RESULTS["data"][f"{tag}_top_explain"] = [
        {k: r[k] for k in ("name", "a", "b", "delta", "share_pct", "status")} for r in d["explain"][:8]
    ]
    return d


def batch_checks(d: dict[str, Any]) -> None:
    p50 = next(s for s in d["step_time"] if s["stat"] == "p50")
    check(
        "batch_step_time_up",
        p50["delta"] > 0 and p50["significant"],
        f"median {p50['a']:.3f} -> {p50['b']:.3f} ms, {p50['why']}",
    )
    tp = d["throughput"]
    ps = tp.get("per_sample") or {}
    check(
        "batch_throughput_up",
        (tp.get("ratio") or 0) > 1 and bool(ps.get("significant")) and ps.get("delta", 0) < 0,
        f"samples/s {tp.get('samples_per_s_a')} -> {tp.get('samples_per_s_b')} (x{tp.get('ratio')}); "
        f"per sample: {ps.get('why')}",
    )
    mem = d["memory"]
    check(
        "batch_memory_peak_up",
        (mem.get("peak_bytes_a") or 0) > 0 and (mem.get("peak_bytes_b") or 0) > mem["peak_bytes_a"],
        f"NVML memory peak {mem.get('peak_bytes_a')} -> {mem.get('peak_bytes_b')} bytes",
    )
    gpu = next(m for m in d["matching"] if m["table"] == "gpu")
    # cuDNN may pick other convolution kernels at another batch size: the share is recorded, the
    # check only asks that the same model's kernels are recognized as the same by name
    check(
        "batch_kernels_match",
        gpu["matched"] > 0,
        f"{gpu['matched']} kernel names in both; GPU time in matched names: A {gpu['matched_a_pct']}%, "
        f"B {gpu['matched_b_pct']}%; only in A {gpu['vanished']}, only in B {gpu['new']}",
    )


def compile_checks(d: dict[str, Any]) -> None:
    k = d["kernels"]
    calls_a = sum(r["count_a"] or 0 for r in k)
    calls_b = sum(r["count_b"] or 0 for r in k)
    check("compile_fewer_kernels", calls_b < calls_a, f"GPU work items per step {calls_a:.0f} -> {calls_b:.0f}")
    new = [r for r in k if r["status"] == "new"]
    gone = [r for r in k if r["status"] == "vanished"]
    triton_new = [r["name"] for r in new if "triton" in r["name"].lower()]
    aten_gone = [r["name"] for r in gone if "at::native" in r["name"]]
    check("compile_triton_new", bool(triton_new), f"{len(triton_new)} new Triton kernels, e.g. {triton_new[:3]}")
    check("compile_aten_vanished", bool(aten_gone), f"{len(aten_gone)} vanished aten kernels, e.g. {aten_gone[:2]}")
    RESULTS["data"]["compile_kernels_per_step"] = {"a": calls_a, "b": calls_b, "new": len(new), "vanished": len(gone)}


def check_cmds(prof: dict[str, Path | None]) -> None:
    b4, b512 = prof.get("resnet18_b4"), prof.get("resnet18_b512")
    if b4 and b512:
        p = dlscope("check", str(b512), "--baseline", str(b4), "--metric", "step_p50,throughput,mem_peak")
        RESULTS["data"]["check_batch"] = p.stdout
        lines = p.stdout.strip().splitlines()
        check(
            "check_regression_exit_1",
            p.returncode == 1
            and any(x.startswith("REGRESSION step_p50") for x in lines)
            and any(x.startswith("ok throughput") for x in lines),
            f"rc {p.returncode}: {p.stdout.strip()}",
        )
        check(
            "check_mem_peak_regression",
            any(x.startswith("REGRESSION mem_peak") for x in lines),
            next((x for x in lines if "mem_peak" in x), "no mem_peak line"),
        )
        p = dlscope("check", str(b4), "--baseline", str(b4))
        check("check_self_exit_0", p.returncode == 0, f"rc {p.returncode}: {p.stdout.strip()}")
        s = dlscope("summary", str(b4), "--format", "json")
        (WORK / "b4_summary.json").write_text(s.stdout)
        p = dlscope("check", str(b4), "--baseline", str(WORK / "b4_summary.json"), "--metric", "step_p50,step_mean")
        check("check_summary_exit_0", p.returncode == 0, f"rc {p.returncode}: {p.stdout.strip()}")
    p = dlscope("check", str(WORK / "missing.dlscope"), "--baseline", str(WORK / "missing2.dlscope"))
    check(
        "check_bad_input_exit_2",
        p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1,
        f"rc {p.returncode}, stderr {p.stderr.strip()!r}",
    )


def main() -> int:
    global LOG
    OUT.mkdir(parents=True, exist_ok=True)
    LOG = (OUT / "gpu_diff.log").open("w")
    try:
        import torch

        RESULTS["data"]["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
        RESULTS["data"]["torch"] = torch.__version__
    except Exception as e:
        RESULTS["errors"]["torch"] = repr(e)
    prof: dict[str, Path | None] = {}
    diffs = {}
    # one pair at a time, each diffed and checked before the next is profiled: a slow
    # torch.compile cannot starve the batch comparison of time
    for name in ("resnet18_b4", "resnet18_b512"):
        prof[name] = part(f"profile_{name}", profile, name)
        check(f"profile_{name}", prof[name] is not None, str(prof[name]))
    if prof.get("resnet18_b4") and prof.get("resnet18_b512"):
        diffs["batch"] = part("diff_batch", run_diff, "batch", prof["resnet18_b4"], prof["resnet18_b512"])
        if diffs["batch"]:
            part("batch_checks", batch_checks, diffs["batch"])
    part("check_cmds", check_cmds, prof)
    for name in ("mlp_eager", "mlp_compiled"):
        prof[name] = part(f"profile_{name}", profile, name)
        check(f"profile_{name}", prof[name] is not None, str(prof[name]))
    if prof.get("mlp_eager") and prof.get("mlp_compiled"):
        diffs["compile"] = part("diff_compile", run_diff, "compile", prof["mlp_eager"], prof["mlp_compiled"])
        if diffs["compile"]:
            part("compile_checks", compile_checks, diffs["compile"])
    (OUT / "diffs.json").write_text(json.dumps(diffs, indent=1, default=str))
    try:
        tar = OUT / "profiles.tar.gz"
        with tarfile.open(tar, "w:gz") as t:
            for p in prof.values():
                if p is not None:
                    t.add(p, arcname=p.name)
        if tar.stat().st_size > 15 * 2**20:
            tar.unlink()
            RESULTS["data"]["profiles_tar"] = "left out: over 15 MiB"
    except Exception as e:
        RESULTS["errors"]["tar"] = repr(e)
    RESULTS["data"]["elapsed_s"] = time.monotonic() - START
    failed = [k for k, v in RESULTS["checks"].items() if v["status"] == "FAIL"]
    RESULTS["failed"] = failed
    (OUT / "gpu_diff.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    log("FAILED: " + ", ".join(failed) if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
