"""GPU validation of issue 15 (JAX ops and kernels, the CUPTI path, Nsight Compute), one script.

Run on the GPU machine from the repository root (dlscope from ./src, its dependencies on
PYTHONPATH), never using the network:

    OUT=/some/dir python3 bench/gpu_jaxncu.py

Parts, most needed first (each catches its own errors and records them; the script never fails as
a whole; a part not started by 215 s is skipped and says so):

1. env: versions; whether cupti-python imports, and if not the reason dlscope gives; the libcupti
   files dlscope would load.
2. jax_profile: a jitted MLP training loop (StepTraceAnnotation steps, TraceAnnotation phases) under
   ``python3 -m dlscope profile``: kernels, HLO ops, and the share of kernel time attributed to an
   op (target >= 95%), op_sum and tensor_core tops.
3. cupy: a CuPy program under ``dlscope profile``: kernels seen through CUPTI, or the reason.
4. ncu: a small PyTorch model under ``dlscope profile``, then ``dlscope ncu PROFILE --top 3 --
   CMD``: kernel_metrics stored, the kernel_metrics report (memory/compute-bound); and the ncu
   CSV of the top kernel with dlscope's sections and metrics, kept as test data.
5. jax_import: the same program writing its own jax.profiler trace folder (kept, tar.gz, as test
   data), imported with ``dlscope import``: the same share.

Writes $OUT/gpu_jaxncu.json (every number), $OUT/gpu_jaxncu.log, $OUT/ncu_top1.csv and
$OUT/traces.tar.gz (the JAX trace folder and the small profiles). About 3 minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or "/tmp/dlscope-gpu-jaxncu")
WORK = Path(tempfile.mkdtemp(prefix="dlscope-jaxncu-"))
START = time.monotonic()
BUDGET_S = 215  # stop starting parts after this
RESULTS: dict[str, Any] = {"parts": {}, "errors": {}}
LOGF: Any = None

ENV = dict(os.environ)
ENV["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
ENV["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), *[p for p in ENV.get("PYTHONPATH", "").split(os.pathsep) if p]])
ENV.pop("DLSCOPE_SESSION", None)

JAX_PROGRAM = """
import os, sys
import jax, jax.numpy as jnp

def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.gelu(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)

@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss

@jax.jit
def next_batch(x, step):
    return x * (1.0 + 1e-3 * step)

key = jax.random.PRNGKey(0)
sizes = [1024, 4096, 4096, 4096, 1024]
params = []
for a, b in zip(sizes[:-1], sizes[1:]):
    key, k = jax.random.split(key)
    params.append((jax.random.normal(k, (a, b), jnp.bfloat16) * 0.02, jnp.zeros(b, jnp.bfloat16)))
x = jax.random.normal(key, (512, 1024), jnp.bfloat16)
y = jnp.zeros((512, 1024), jnp.bfloat16)
trace_dir = os.environ.get("JAX_TRACE_DIR")
if trace_dir:  # warm up outside the trace, then trace the loop with jax.profiler itself
    params, loss = train_step(params, next_batch(x, 0.0), y); loss.block_until_ready()
    jax.profiler.start_trace(trace_dir)
for step in range(12):
    with jax.profiler.StepTraceAnnotation("train", step_num=step):
        with jax.profiler.TraceAnnotation("data"):
            xb = next_batch(x, float(step))
        with jax.profiler.TraceAnnotation("compute"):
            params, loss = train_step(params, xb, y)
            loss.block_until_ready()
if trace_dir:
    jax.profiler.stop_trace()
print("devices", jax.devices(), "loss", float(loss))
"""

CUPY_PROGRAM = """
import cupy as cp
import dlscope
a = cp.random.random((2048, 2048), dtype=cp.float32)
b = cp.random.random((2048, 2048), dtype=cp.float32)
for i in range(20):
    with dlscope.phase("compute"):
        c = a @ b
        c = cp.tanh(c) + 1.0
        cp.cuda.Device().synchronize()
    dlscope.step()
print("sum", float(c.sum()))
"""

TORCH_PROGRAM = """
import torch
import dlscope
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(64, 64, 3, padding=1),
                            torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                            torch.nn.Linear(64, 1000)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 3, 64, 64, device="cuda")
y = torch.randint(0, 1000, (64,), device="cuda")
for step in range(6):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print("loss", float(loss))
"""


def log(*parts: Any) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOGF is not None:
        LOGF.write(line + "\n")
        LOGF.flush()


def elapsed() -> float:
    return time.monotonic() - START


def run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    log("$", " ".join(str(c) for c in cmd)[:300])
    t = time.monotonic()
    r = subprocess.run(
        [str(c) for c in cmd], cwd=REPO, env=env or ENV, capture_output=True, text=True, timeout=timeout, check=False
    )
    log(f"  rc={r.returncode} in {time.monotonic() - t:.1f}s")
    if r.returncode != 0:
        log("  stderr tail:", r.stderr[-1500:])
    return r


def dlscope(*args: Any, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "dlscope", *args], timeout)


def sql(profile: Path, query: str) -> list[dict[str, Any]]:
    """Rows of a query over a profile, in this process (a CLI start per query costs seconds)."""
    sys.path.insert(0, str(REPO / "src"))
    from dlscope.analysis.core.context import ProfileData

    try:
        data = ProfileData.open(profile)
        cur = data.con.execute(query)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    except Exception as e:
        log(f"  sql failed on {profile}: {e.__class__.__name__}: {str(e)[:200]}")
        return []


ATTRIBUTED = """SELECT count(*) AS kernels, sum(k.end_ns - k.start_ns)::BIGINT AS kernel_ns,
    sum(k.end_ns - k.start_ns) FILTER (WHERE o.op_id IS NOT NULL)::BIGINT AS attributed_ns,
    100.0 * sum(k.end_ns - k.start_ns) FILTER (WHERE o.op_id IS NOT NULL)
        / nullif(sum(k.end_ns - k.start_ns), 0) AS attributed_pct
    FROM kernels k LEFT JOIN (SELECT external_id, any_value(op_id) AS op_id
        FROM ops WHERE external_id IS NOT NULL GROUP BY 1) o
    ON o.external_id = k.external_id"""


def part(name: str):
    def deco(fn):
        def wrapped() -> None:
            if elapsed() > BUDGET_S:
                RESULTS["errors"][name] = f"skipped: {elapsed():.0f}s used"
                log(f"== {name}: skipped (time)")
                return
            log(f"== {name} (t={elapsed():.0f}s)")
            try:
                RESULTS["parts"][name] = fn()
            except Exception as e:  # one part's failure must not lose the others
                RESULTS["errors"][name] = f"{e.__class__.__name__}: {e}"
                log(traceback.format_exc())
            log(f"   -> {json.dumps(RESULTS['parts'].get(name), default=str)[:1500]}")

        return wrapped

    return deco


@part("env")
def env() -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    from dlscope.capture import cupti_lib

    out: dict[str, Any] = {
        "python": sys.version.split()[0],
        "ncu": shutil.which("ncu") or (os.path.exists("/usr/local/cuda/bin/ncu") and "/usr/local/cuda/bin/ncu"),
    }
    for mod in ("jax", "jaxlib", "cupy", "torch"):
        r = subprocess.run(
            [sys.executable, "-c", f"import {mod}; print({mod}.__version__)"], capture_output=True, text=True, env=ENV
        )
        out[mod] = r.stdout.strip() or r.stderr.strip().splitlines()[-1:]
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        from dlscope.capture import cupti_lib
        try:
            from cupti import cupti
            print("ok", cupti_lib.preload(), cupti_lib.already_loaded())
        except Exception as e:
            print("fail", cupti_lib.import_failure(e))
        """),
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    out["cupti_python"] = (r.stdout or r.stderr).strip()[-500:]
    out["libcupti_candidates"] = [str(p) for p in cupti_lib.candidates()][:8]
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True
    )
    out["gpu"] = smi.stdout.strip()
    return out


@part("jax_profile")
def jax_profile() -> dict[str, Any]:
    prog = WORK / "jax_mlp.py"
    prog.write_text(JAX_PROGRAM)
    prof = WORK / "jax.dlscope"
    r = dlscope("profile", "--quiet", "-o", prof, "--", sys.executable, prog, timeout=150)
    out: dict[str, Any] = {"rc": r.returncode, "stdout": r.stdout[-300:]}
    meta = json.loads((prof / "meta.json").read_text())
    out["collectors"] = {k: (v.get("status"), v.get("reason")) for k, v in meta["collectors"].items()}
    out["notes"] = meta.get("notes", [])[:10]
    out["attribution"] = sql(prof, ATTRIBUTED)
    # past the first step: compilation (autotuning kernels XLA does not annotate) is over
    out["attribution_after_step0"] = sql(prof, ATTRIBUTED + " WHERE k.step >= 1")
    out["api_calls"] = sql(prof, "SELECT count(*) AS n, count(DISTINCT name) AS names FROM api")
    out["ops_by_category"] = sql(prof, "SELECT category, count(*) AS n FROM ops GROUP BY 1")
    out["steps"] = sql(prof, "SELECT step, warmup, (end_ns - start_ns) / 1e6 AS ms FROM steps ORDER BY step")
    out["unattributed_top"] = sql(
        prof,
        """SELECT name, count(*) AS n, sum(end_ns - start_ns) / 1e6 AS ms FROM kernels
        WHERE external_id IS NULL OR external_id NOT IN (SELECT external_id FROM ops WHERE external_id IS NOT NULL)
        GROUP BY 1 ORDER BY ms DESC LIMIT 8""",
    )
    r = dlscope("stats", prof, "--report", "op_sum,tensor_core,kernel_metrics", "--format", "json", timeout=60)
    if r.returncode == 0:
        rep = json.loads(r.stdout)
        out["op_sum_top"] = rep.get("op_sum", [])[:8] if isinstance(rep.get("op_sum"), list) else rep.get("op_sum")
        out["tensor_core_top"] = (
            rep.get("tensor_core", [])[:6] if isinstance(rep.get("tensor_core"), list) else rep.get("tensor_core")
        )
    r = dlscope("advise", prof, timeout=60)
    out["advise"] = r.stdout[-1500:]
    return out


@part("jax_import")
def jax_import() -> dict[str, Any]:
    prog = WORK / "jax_mlp.py"
    prog.write_text(JAX_PROGRAM)
    trace = WORK / "jax_trace"
    env = dict(ENV, JAX_TRACE_DIR=str(trace))
    r = run([sys.executable, prog], 120, env)
    out: dict[str, Any] = {
        "rc": r.returncode,
        "files": sorted(f"{p.relative_to(trace)} {p.stat().st_size}" for p in trace.rglob("*") if p.is_file()),
    }
    prof = WORK / "jax_import.dlscope"
    r = dlscope("import", trace, "-o", prof, timeout=90)
    out["import_rc"] = r.returncode
    out["import_err"] = r.stderr[-500:]
    if r.returncode == 0:
        out["attribution"] = sql(prof, ATTRIBUTED)
        out["ops_by_category"] = sql(prof, "SELECT category, count(*) AS n FROM ops GROUP BY 1")
        out["sources"] = sql(prof, "SELECT DISTINCT name, source FROM ops WHERE source IS NOT NULL LIMIT 8")
        out["kernel_sample"] = sql(
            prof,
            """SELECT name, grid_x, block_x, registers, shared_bytes, external_id
                                            FROM kernels LIMIT 5""",
        )
    return out


@part("cupy")
def cupy() -> dict[str, Any]:
    prog = WORK / "cupy_prog.py"
    prog.write_text(CUPY_PROGRAM)
    prof = WORK / "cupy.dlscope"
    r = dlscope("profile", "--quiet", "-o", prof, "--", sys.executable, prog, timeout=90)
    out: dict[str, Any] = {"rc": r.returncode}
    meta = json.loads((prof / "meta.json").read_text())
    out["cupti"] = meta["collectors"].get("cupti")
    out["kernels"] = sql(prof, "SELECT count(*) AS n, count(DISTINCT name) AS names FROM kernels")
    out["notes"] = meta.get("notes", [])[:5]
    return out


@part("ncu")
def ncu() -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "src"))
    prog = WORK / "torch_prog.py"
    prog.write_text(TORCH_PROGRAM)
    prof = WORK / "torch.dlscope"
    r = dlscope("profile", "--quiet", "-o", prof, "--", sys.executable, prog, timeout=90)
    out: dict[str, Any] = {"profile_rc": r.returncode}
    out["top_kernels"] = sql(
        prof,
        """SELECT name, count(*) AS n, sum(end_ns - start_ns) / 1e6 AS ms FROM kernels
                                      GROUP BY 1 ORDER BY ms DESC LIMIT 3""",
    )
    r = dlscope("ncu", prof, "--top", "3", "--timeout", "60", "--", sys.executable, prog, timeout=200)
    out["ncu_rc"] = r.returncode
    out["ncu_stderr"] = r.stderr[-1500:]
    rep = dlscope("stats", prof, "--report", "kernel_metrics", "--format", "json", timeout=60)
    if rep.returncode == 0:  # one report: a list of rows; several: {name: rows}
        got = json.loads(rep.stdout)
        out["kernel_metrics"] = got.get("kernel_metrics") if isinstance(got, dict) else got
    else:
        out["kernel_metrics"] = rep.stderr[-300:]
    out["stored"] = sql(
        prof,
        "SELECT count(*) AS n, count(DISTINCT name) AS kernels, count(DISTINCT metric) AS metrics FROM kernel_metrics",
    )
    out["tensor_metrics"] = sql(
        prof,
        "SELECT DISTINCT metric FROM kernel_metrics WHERE metric LIKE '%tensor%' "
        "OR metric LIKE '%sass%' OR metric LIKE 'dram__bytes%'",
    )
    # the top kernel once more, its CSV kept as test data for the roofline and tensor columns
    if out["top_kernels"] and elapsed() < BUDGET_S + 20:
        from dlscope.application.ncu import (
            DEFAULT_METRICS,
            DEFAULT_SECTIONS,
            NcuOptions,
            Target,
            find_ncu,
            ncu_command,
        )

        top = out["top_kernels"][0]
        opts = NcuOptions(
            str(prof), [sys.executable, str(prog)], section=list(DEFAULT_SECTIONS), metrics=list(DEFAULT_METRICS)
        )
        csv = OUT / "ncu_top1.csv"
        cmd = ncu_command(find_ncu(None), Target(top["name"], 0, int(top["n"])), opts, csv)
        r = run(cmd, 90)
        out["csv_rc"] = r.returncode
        out["csv_bytes"] = csv.stat().st_size if csv.exists() else 0
    return out


def pack() -> None:
    tar = OUT / "traces.tar.gz"
    with tarfile.open(tar, "w:gz") as t:
        for name in ("jax_trace", "jax.dlscope", "jax_import.dlscope", "cupy.dlscope", "torch.dlscope"):
            p = WORK / name
            if p.exists():
                t.add(p, arcname=name)
    size = tar.stat().st_size
    if size > 15 * 1024 * 1024:  # too big to come back: keep the JAX trace only
        with tarfile.open(tar, "w:gz") as t:
            if (WORK / "jax_trace").exists():
                t.add(WORK / "jax_trace", arcname="jax_trace")
    RESULTS["tar_bytes"] = tar.stat().st_size


def main() -> int:
    global LOGF
    OUT.mkdir(parents=True, exist_ok=True)
    LOGF = open(OUT / "gpu_jaxncu.log", "w")  # noqa: SIM115
    for fn in (env, jax_profile, cupy, ncu, jax_import):  # most needed first
        fn()
    try:
        pack()
    except Exception as e:
        RESULTS["errors"]["pack"] = f"{e.__class__.__name__}: {e}"
    RESULTS["elapsed_s"] = round(elapsed(), 1)
    jp = RESULTS["parts"].get("jax_profile", {}).get("attribution") or [{}]
    ji = RESULTS["parts"].get("jax_import", {}).get("attribution") or [{}]
    js = RESULTS["parts"].get("jax_profile", {}).get("attribution_after_step0") or [{}]
    RESULTS["summary"] = {
        "jax_profile_attributed_pct": jp[0].get("attributed_pct"),
        "jax_profile_attributed_pct_after_step0": js[0].get("attributed_pct"),
        "jax_import_attributed_pct": ji[0].get("attributed_pct"),
        "cupy_kernels": (RESULTS["parts"].get("cupy", {}).get("kernels") or [{}])[0].get("n"),
        "cupy_cupti": RESULTS["parts"].get("cupy", {}).get("cupti"),
        "ncu_kernels_stored": (RESULTS["parts"].get("ncu", {}).get("stored") or [{}])[0].get("kernels"),
    }
    (OUT / "gpu_jaxncu.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    log("SUMMARY", json.dumps(RESULTS["summary"], default=str))
    log("errors", json.dumps(RESULTS["errors"], default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
