"""GPU validation of the hardware layer (issue 4), in one self-checking script.

Run on a machine with an NVIDIA GPU, from the repository root (dlscope is taken from ./src):

    OUT=/some/dir python bench/gpu_hw_layer.py [--quick]

It needs, besides torch/torchvision and CuPy: duckdb, pyarrow, numpy, rich (dlscope's own
dependencies), nvidia-ml-py, cupti-python and nvtx. It never uses the network. Checks:

1. nvml: the sampler on the real NVML: every counter read, GPM supported, cost of each call.
2. resnet50: ResNet-50 (bf16, channels-last) under ``dlscope profile`` with a CPU-only
   ``preprocess`` phase and a GPU ``compute`` phase; ``dlscope stats --report gpu_metrics`` must
   show SM and tensor activity high in ``compute`` and low in ``preprocess``; the sampler (a
   thread of the dlscope parent) must use under 1% of a core.
3. sampler_helper: the sampler as a helper process under the in-process API, its CPU use.
4. cupy_counts (cupti on, then auto): a CuPy program launching a uniquely named kernel a known
   number of times and copying known bytes; the CUPTI path must report exactly those counts,
   each kernel tied to its launch call, on the profile's clock, with no dropped records.
5. cupti_overhead: step time of a GPU-bound CuPy step with no profiler vs under ``dlscope
   profile`` (CUPTI started by ``import cupy``), alternated runs, medians; budget 3%. The same
   on a launch-bound step, for information.
6. nvtx_ncu: ``ncu --nvtx --nvtx-include compute/`` around ``dlscope profile --nvtx``: ncu must
   profile the kernel launched inside dlscope's phase ``compute`` (so NVTX ranges are emitted),
   and dlscope's CUPTI layer must step aside because ncu holds CUPTI, saying so in meta.json.

Writes ``$OUT/gpu_hw_layer.json`` (every number), ``$OUT/gpu_hw_layer.log`` and a few report
files, prints a PASS/FAIL table, and exits 1 if anything failed. Takes about 4 minutes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT") or "/tmp/dlscope-gpu-hw-layer")
WORK = Path(tempfile.mkdtemp(prefix="dlscope-gpu-"))
TIME_LIMIT_S = 7 * 60
START = time.monotonic()
RESULTS: dict[str, Any] = {"checks": {}, "data": {}}
LOG = None


def log(*parts: Any) -> None:
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    if LOG is not None:
        LOG.write(line + "\n")
        LOG.flush()


def check(name: str, ok: bool | None, detail: str) -> None:
    """ok: True pass, False fail, None skipped."""
    status = {True: "PASS", False: "FAIL", None: "SKIP"}[ok]
    RESULTS["checks"][name] = {"status": status, "detail": detail}
    log(f"[{status}] {name}: {detail}")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), e.get("PYTHONPATH", "")) if p)
    e["PYTHONUNBUFFERED"] = "1"
    e.pop("DLSCOPE_SESSION", None)
    return e


def run(cmd: list[str], timeout: float, name: str) -> subprocess.CompletedProcess[str]:
    log(f"$ {' '.join(cmd)}")
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), cwd=WORK)
    log(f"  -> exit {r.returncode} in {time.monotonic() - t:.1f} s")
    if r.returncode != 0:
        log(f"  stderr ({name}):\n" + textwrap.indent(r.stderr[-4000:], "    "))
    return r


def dlscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "dlscope", *args], timeout, f"dlscope {args[0]}")


def sql(profile: Path, query: str) -> list[dict[str, Any]]:
    r = dlscope("sql", str(profile), query, "--format", "json", timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"dlscope sql failed: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout)


def meta(profile: Path) -> dict[str, Any]:
    return json.loads((profile / "meta.json").read_text())


def program(name: str, text: str) -> Path:
    p = WORK / name
    p.write_text(textwrap.dedent(text))
    return p


def section(name: str, fn: Callable[[], None]) -> None:
    if time.monotonic() - START > TIME_LIMIT_S:
        check(name, None, "skipped: the script's time limit was reached")
        return
    log(f"\n=== {name} ===")
    try:
        fn()
    except Exception as e:
        log(traceback.format_exc())
        check(name, False, f"crashed: {e.__class__.__name__}: {e}")


# ---- 0. what is installed ----------------------------------------------------------------------
NEEDED = {
    "duckdb": "duckdb",
    "pyarrow": "pyarrow",
    "numpy": "numpy",
    "rich": "rich",
    "pynvml": "nvidia-ml-py",
    "cupti": "cupti-python",
    "nvtx": "nvtx",
    "torch": "torch",
    "torchvision": "torchvision",
    "cupy": "cupy-cuda13x",
}


def preflight() -> None:
    versions: dict[str, str | None] = {}
    for mod, dist in NEEDED.items():
        if importlib.util.find_spec(mod) is None:
            versions[mod] = None
            continue
        try:
            versions[mod] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[mod] = "installed"
    for extra in ("cuda-bindings", "cuda-pathfinder", "nvidia-cuda-cupti", "cupy-cuda12x"):
        try:
            versions[extra] = importlib.metadata.version(extra)
        except importlib.metadata.PackageNotFoundError:
            pass
    RESULTS["data"]["versions"] = versions
    RESULTS["data"]["python"] = sys.version.split()[0]
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        RESULTS["data"]["nvidia_smi"] = r.stdout.strip()
    missing = [f"{m} ({NEEDED[m]})" for m, v in versions.items() if m in NEEDED and v is None]
    check("preflight", not missing, "all needed packages present" if not missing else f"missing: {', '.join(missing)}")
    log(json.dumps(versions, indent=1))


# ---- 1. the sampler on the real NVML ---------------------------------------------------------------
def nvml_probe() -> None:
    sys.path.insert(0, str(REPO / "src"))
    from dlscope.capture import nvml_api
    from dlscope.capture.nvml_sampler import close_sampler, open_sampler

    spool = WORK / "probe"
    spool.mkdir()
    s = open_sampler(spool, 1, env=dict(os.environ))
    g = s.gpus[0]
    info = dict(g.info)
    cost: dict[str, float] = {}
    for group, fn in s.readers.items():
        if group in s._groups[g.index]:
            t = time.perf_counter_ns()
            for _ in range(200):
                fn(g.handle)
            cost[group + "_us"] = (time.perf_counter_ns() - t) / 200 / 1e3
    pair = s._gpm.get(g.index)
    if pair is not None:
        t = time.perf_counter_ns()
        for _ in range(20):
            pair.sample()
        cost["gpm_sample_us"] = (time.perf_counter_ns() - t) / 20 / 1e3
        pair.swap()
        pair.sample()
        t = time.perf_counter_ns()
        for _ in range(20):
            pair.compare()
        cost["gpm_compare_us"] = (time.perf_counter_ns() - t) / 20 / 1e3
        pair.have_prev = False
    import threading

    stop = threading.Event()
    cpu: dict[str, float] = {}

    def loop() -> None:
        c0, w0 = time.thread_time(), time.monotonic()
        s.run(stop)
        cpu["cpu_s"], cpu["wall_s"] = time.thread_time() - c0, time.monotonic() - w0

    th = threading.Thread(target=loop)
    th.start()
    time.sleep(3.0)
    stop.set()
    th.join()
    close_sampler(spool, 1, s, cpu["cpu_s"], cpu["wall_s"])
    from dlscope.capture import counter_spool

    t, code, v, _ = counter_spool.read_samples(counter_spool.spool_path(spool, 1))
    metrics = list(nvml_api.ALL_METRICS)
    got = sorted({metrics[int(c) % counter_spool.MAX_METRICS] for c in code})
    un = s.unavailable()
    pct = 100 * cpu["cpu_s"] / cpu["wall_s"]
    RESULTS["data"]["nvml"] = {
        "device": info,
        "call_cost": cost,
        "metrics_sampled": got,
        "unavailable": un,
        "samples_3s": len(t),
        "loop_cpu_pct_of_core": pct,
    }
    log(json.dumps(RESULTS["data"]["nvml"], indent=1, default=str))
    check(
        "nvml.device",
        bool(info.get("name")) and bool(info.get("sms")),
        f"{info.get('name')} ({info.get('sms')} SMs, cc {info.get('compute_capability')}, driver {info.get('driver')})",
    )
    check(
        "nvml.gpm",
        bool(info.get("gpm")) and "sm_active" in got and "tensor_active" in got and "pcie_tx" in got,
        f"GPM supported={info.get('gpm')}; sampled {len(got)} metrics; unavailable: {un or 'none'}",
    )
    check("nvml.loop_cpu", pct < 1.0, f"sampling loop {pct:.3f}% of one core at default settings (budget 1%)")


# ---- 2. ResNet-50 under dlscope profile ------------------------------------------------------------
RN50 = """
import sys, time
import numpy as np
import torch, torchvision
import dlscope

steps = int(sys.argv[1])
torch.backends.cudnn.benchmark = True
model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
B = 128
rng = np.random.default_rng(0)
raw = rng.integers(0, 255, size=(B, 224, 224, 3), dtype=np.uint8)
labels = torch.from_numpy(rng.integers(0, 1000, size=(B,))).cuda()
mean = np.array([0.485, 0.456, 0.406], np.float32); std = np.array([0.229, 0.224, 0.225], np.float32)

def train(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()

x = torch.randn(B, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
for _ in range(3):  # cudnn autotuning before the measured steps
    train(x)
torch.cuda.synchronize()
with dlscope.profile(batch_size=B) as prof:
    for _ in range(steps):
        with prof.phase("preprocess"):  # CPU only: normalise on the host, the GPU idles
            t_end = time.perf_counter() + 0.4
            while time.perf_counter() < t_end:
                host = ((raw.astype(np.float32) / 255.0 - mean) / std).transpose(0, 3, 1, 2).copy()
        with prof.phase("compute"):
            x = torch.from_numpy(host).cuda(non_blocking=False).contiguous(memory_format=torch.channels_last)
            t_end = time.perf_counter() + 0.4
            while time.perf_counter() < t_end:
                train(x)
                torch.cuda.synchronize()
        prof.step()
"""


def resnet50() -> None:
    prog = program("rn50.py", RN50)
    out = WORK / "rn50.dlscope"
    steps = 6 if QUICK else 10
    r = dlscope(
        "profile", "-o", str(out), "--batch-size", "128", "--", sys.executable, str(prog), str(steps), timeout=400
    )
    (OUT / "rn50_summary.txt").write_text(r.stdout + "\n" + r.stderr)
    if r.returncode != 0:
        check("resnet50.run", False, f"dlscope profile exited {r.returncode}")
        return
    rows = json.loads(dlscope("stats", str(out), "--report", "gpu_metrics", "--format", "json").stdout)
    (OUT / "rn50_gpu_metrics.json").write_text(json.dumps(rows, indent=1))
    ph = {(r["name"], r["metric"]): r for r in rows if r["scope"] == "phase"}
    m = meta(out)
    nv = m["collectors"].get("nvml", {})
    RESULTS["data"]["resnet50"] = {
        "phases": {
            f"{n}.{k}": {"mean": v["mean"], "max": v["max"], "samples": v["samples"]}
            for (n, k), v in ph.items()
            if n in ("preprocess", "compute")
        },
        "nvml": nv,
        "devices": m.get("devices"),
        "cupti": m["collectors"].get("cupti"),
    }
    log(json.dumps(RESULTS["data"]["resnet50"], indent=1, default=str))

    def mean(phase: str, metric: str) -> float:
        return float(ph[(phase, metric)]["mean"]) if (phase, metric) in ph else float("nan")

    sm_c, sm_p = mean("compute", "sm_active"), mean("preprocess", "sm_active")
    tc_c, tc_p = mean("compute", "tensor_active"), mean("preprocess", "tensor_active")
    # GPM values are window averages (200 ms by default) stamped at the window's middle: windows
    # that straddle a phase boundary blend the two phases, so the contrast is what is checked
    check(
        "resnet50.sm_active",
        sm_c >= 50 and sm_p <= 25 and sm_c >= 3 * max(sm_p, 1),
        f"SM activity: compute {sm_c:.1f}%, preprocess {sm_p:.1f}%",
    )
    check(
        "resnet50.tensor_active",
        tc_c >= 5 and tc_p <= 3 and tc_c >= 4 * max(tc_p, 0.5),
        f"tensor-core activity: compute {tc_c:.1f}%, preprocess {tc_p:.1f}%",
    )
    pcie = mean("compute", "pcie_rx"), mean("preprocess", "pcie_rx")
    check(
        "resnet50.pcie",
        pcie[0] > pcie[1],
        f"PCIe rx: compute {pcie[0] / 1e6:.1f} MB/s, "
        f"preprocess {pcie[1] / 1e6:.1f} MB/s (the batch is copied in compute)",
    )
    st = nv.get("settings", {})
    pct = st.get("sampler_cpu_pct_of_core")
    check(
        "resnet50.sampler_cpu",
        nv.get("status") == "ok" and pct is not None and pct < 1.0,
        f"sampler thread in the dlscope parent: {pct if pct is None else round(pct, 3)}% of one core "
        f"({st.get('samples')} samples, mode {st.get('mode')})",
    )
    check("resnet50.summary", "GPU counters" in r.stdout, "the summary shows the GPU counters line")


# ---- 3. the sampler as a helper process (in-process API) --------------------------------------------
HELPER = """
import sys, time
import dlscope
with dlscope.profile(sys.argv[1], cupti="off"):
    time.sleep(float(sys.argv[2]))
"""


def sampler_helper() -> None:
    prog = program("helper.py", HELPER)
    out = WORK / "helper.dlscope"
    secs = 8 if QUICK else 15
    r = run([sys.executable, str(prog), str(out), str(secs)], 120, "helper")
    if r.returncode != 0:
        check("sampler_helper", False, f"exited {r.returncode}")
        return
    nv = meta(out)["collectors"].get("nvml", {})
    st = nv.get("settings", {})
    RESULTS["data"]["sampler_helper"] = nv
    loop = st.get("sampler_cpu_pct_of_core")
    total = st.get("sampler_process_cpu_s")
    check(
        "sampler_helper.cpu",
        nv.get("status") == "ok" and st.get("mode") == "process" and loop is not None and loop < 1.0,
        f"helper process: sampling loop {loop if loop is None else round(loop, 3)}% of one core; "
        f"whole process {total if total is None else round(total, 2)} CPU s over {secs} s (start-up included)",
    )


# ---- 4. CuPy kernel counts through CUPTI ------------------------------------------------------------
CUPY_COUNT = """
import json, sys
import numpy as np
import cupy as cp
import dlscope

K_PER_STEP, STEPS, COPIES, NBYTES = 200, 5, 10, 4 << 20
probe = cp.RawKernel(r'''
extern "C" __global__ void dlscope_probe_kernel(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] = a[i] * 0.5f + 1.0f;
}''', "dlscope_probe_kernel")
a = cp.ones(1 << 16, dtype=cp.float32)
host = np.ones(NBYTES // 4, dtype=np.float32)
launches = h2d = d2h = 0
with dlscope.profile() as prof:
    for s in range(STEPS):
        with prof.phase("compute"):
            for _ in range(K_PER_STEP):
                probe(((1 << 16) // 256,), (256,), (a, np.int32(1 << 16)))
                launches += 1
        with prof.phase("copy"):
            if s < 2:
                for _ in range(COPIES // 2):
                    d = cp.asarray(host); h2d += 1
                    d.get(); d2h += 1
        cp.cuda.Device().synchronize()
        prof.step()
print(json.dumps({"launches": launches, "per_step": K_PER_STEP, "steps": STEPS, "h2d": h2d, "d2h": d2h,
                  "bytes": NBYTES}))
"""


def cupy_counts(mode: str) -> Callable[[], None]:
    def body() -> None:
        prog = program("cupy_count.py", CUPY_COUNT)
        out = WORK / f"cupy_{mode}.dlscope"
        r = dlscope("profile", "-o", str(out), "--cupti", mode, "--quiet", "--", sys.executable, str(prog), timeout=300)
        if r.returncode != 0:
            check(f"cupy_counts.{mode}", False, f"dlscope profile exited {r.returncode}")
            return
        truth = json.loads(r.stdout.strip().splitlines()[-1])
        m = meta(out)
        cu = m["collectors"].get("cupti", {})
        n = sql(out, "SELECT count(*) AS n FROM kernels WHERE name = 'dlscope_probe_kernel'")[0]["n"]
        per_step = sql(
            out,
            """SELECT step, count(*) AS n FROM kernels WHERE name = 'dlscope_probe_kernel'
                               GROUP BY step ORDER BY step""",
        )
        linked = sql(
            out,
            """SELECT count(*) AS n, count(a.name) AS with_api, min(k.start_ns - a.start_ns) AS lead_ns,
                                    any_value(a.name) AS api
                             FROM kernels k LEFT JOIN api a ON a.correlation_id = k.correlation_id
                             WHERE k.name = 'dlscope_probe_kernel'""",
        )[0]
        copies = sql(
            out,
            f"""SELECT copy_kind, count(*) AS n FROM memcpy WHERE bytes = {truth["bytes"]}
                              GROUP BY 1 ORDER BY 1""",
        )
        inside = sql(
            out,
            """SELECT count(*) AS n FROM kernels k JOIN api a ON a.correlation_id = k.correlation_id
                             JOIN phases p ON p.name = 'compute' AND a.start_ns >= p.start_ns AND a.start_ns < p.end_ns
                             WHERE k.name = 'dlscope_probe_kernel'""",
        )[0]["n"]
        tables = sql(
            out,
            """SELECT (SELECT count(*) FROM kernels) AS kernels, (SELECT count(*) FROM api) AS api,
                             (SELECT count(*) FROM memcpy) AS memcpy, (SELECT count(*) FROM memset) AS memset,
                             (SELECT count(*) FROM sync) AS sync""",
        )[0]
        RESULTS["data"][f"cupy_counts_{mode}"] = {
            "truth": truth,
            "probe_kernels": n,
            "per_step": per_step,
            "linked": linked,
            "copies": copies,
            "launched_in_compute": inside,
            "tables": tables,
            "cupti": cu,
            "dropped": m.get("dropped", {}),
            "notes": m.get("notes", []),
        }
        log(json.dumps(RESULTS["data"][f"cupy_counts_{mode}"], indent=1, default=str))
        ok_status = cu.get("status") == "ok"
        check(
            f"cupy_counts.{mode}.status",
            ok_status,
            f"cupti {cu.get('status')}: {cu.get('reason') or cu.get('settings', {}).get('started_by')}; "
            f"record sizes {cu.get('settings', {}).get('record_bytes')}",
        )
        check(
            f"cupy_counts.{mode}.kernels",
            n == truth["launches"]
            and all(r["n"] == truth["per_step"] for r in per_step)
            and len(per_step) == truth["steps"],
            f"{n} probe kernels recorded for {truth['launches']} launches; per step {[r['n'] for r in per_step]}",
        )
        check(
            f"cupy_counts.{mode}.launch_link",
            linked["with_api"] == n and n > 0 and (linked["lead_ns"] or -1) >= 0 and inside == n,
            f"{linked['with_api']}/{n} tied to their launch call ({linked['api']}); "
            f"earliest kernel start - launch start {linked['lead_ns']} ns; {inside} launched inside 'compute'",
        )
        by_kind = {c["copy_kind"]: c["n"] for c in copies}
        check(
            f"cupy_counts.{mode}.memcpy",
            by_kind.get("HtoD") == truth["h2d"] and by_kind.get("DtoH") == truth["d2h"],
            f"copies of {truth['bytes']} bytes: {by_kind} (program made {truth['h2d']} HtoD, {truth['d2h']} DtoH)",
        )
        dropped = int(m.get("dropped", {}).get("cupti", 0))
        check(f"cupy_counts.{mode}.dropped", dropped == 0, f"{dropped} dropped records")

    return body


# ---- 5. CUPTI-path overhead ---------------------------------------------------------------------------
CUPY_STEP = """
import json, sys, time
import cupy as cp

kind, steps, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if kind == "gpu":  # GPU-bound: tensor-core GEMMs and bandwidth-bound element-wise work
    a = cp.random.standard_normal((4096, 4096), dtype=cp.float32).astype(cp.float16)
    b = cp.random.standard_normal((4096, 4096), dtype=cp.float32).astype(cp.float16)
    def step():
        for _ in range(48):
            c = a @ b
            c *= 0.5
            c += 1
else:  # launch-bound: many tiny kernels
    x = cp.zeros(1024, dtype=cp.float32)
    def step():
        for _ in range(1500):
            x.__iadd__(1)  # in place, and no assignment that would make x local to step()
times = []
for i in range(warm + steps):
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    step()
    cp.cuda.Device().synchronize()
    if i >= warm:
        times.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"step_ms": times}))
"""


def cupti_overhead(kind: str, pairs: int, budget_pct: float | None) -> Callable[[], None]:
    def body() -> None:
        prog = program("cupy_step.py", CUPY_STEP)
        steps, warm = (40, 10) if kind == "gpu" else (30, 5)
        base: list[float] = []
        prof: list[float] = []
        cupti_states = []
        for i in range(pairs):
            for which in ("base", "prof") if i % 2 == 0 else ("prof", "base"):  # ABBA: drift cancels
                if which == "base":
                    r = run([sys.executable, str(prog), kind, str(steps), str(warm)], 200, "baseline")
                else:
                    out = WORK / f"ovh_{kind}_{i}.dlscope"
                    r = dlscope(
                        "profile",
                        "-o",
                        str(out),
                        "-f",
                        "--quiet",
                        "--",
                        sys.executable,
                        str(prog),
                        kind,
                        str(steps),
                        str(warm),
                        timeout=300,
                    )
                    cupti_states.append(meta(out)["collectors"].get("cupti", {}).get("status"))
                if r.returncode != 0:
                    raise RuntimeError(f"{which} run exited {r.returncode}")
                med = statistics.median(json.loads(r.stdout.strip().splitlines()[-1])["step_ms"])
                (base if which == "base" else prof).append(med)
        b, p = statistics.median(base), statistics.median(prof)
        pct = 100 * (p / b - 1)
        RESULTS["data"][f"cupti_overhead_{kind}"] = {
            "baseline_step_ms": base,
            "profiled_step_ms": prof,
            "median_baseline_ms": b,
            "median_profiled_ms": p,
            "overhead_pct": pct,
            "cupti_status": cupti_states,
        }
        log(json.dumps(RESULTS["data"][f"cupti_overhead_{kind}"], indent=1))
        traced = all(s == "ok" for s in cupti_states)
        detail = (
            f"{kind}-bound step: {b:.3f} ms bare, {p:.3f} ms under dlscope profile (CUPTI traced: {traced}); "
            f"overhead {pct:+.2f}% (medians of {pairs} alternated runs each)"
        )
        if budget_pct is None:
            check(f"cupti_overhead.{kind}", None if traced else False, detail + " [information, no budget]")
        else:
            check(f"cupti_overhead.{kind}", traced and pct < budget_pct, detail + f" [budget {budget_pct}%]")

    return body


# ---- 6. NVTX seen by Nsight Compute, and CUPTI stepping aside ---------------------------------------
CUPY_NVTX = """
import cupy as cp
import numpy as np
import dlscope

src = r'''extern "C" __global__ void NAME(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1.0f; }'''
outside = cp.RawKernel(src.replace("NAME", "dlscope_nvtx_outside"), "dlscope_nvtx_outside")
inside = cp.RawKernel(src.replace("NAME", "dlscope_nvtx_inside"), "dlscope_nvtx_inside")
a = cp.zeros(1 << 16, dtype=cp.float32)
args = ((1 << 16) // 256,), (256,), (a, np.int32(1 << 16))
for _ in range(3):
    outside(*args)
with dlscope.phase("compute"):
    inside(*args)
cp.cuda.Device().synchronize()
"""


def cupti_repeat(n: int) -> Callable[[], None]:
    """The CUPTI-path program under ``dlscope profile`` n times, each bounded: no run may hang."""

    def body() -> None:
        prog = program("cupy_step.py", CUPY_STEP)
        times, hung = [], 0
        for i in range(n):
            t = time.monotonic()
            try:
                r = dlscope(
                    "profile",
                    "-o",
                    str(WORK / f"rep_{i}.dlscope"),
                    "-f",
                    "--quiet",
                    "--",
                    sys.executable,
                    str(prog),
                    "gpu",
                    "10",
                    "3",
                    timeout=60,
                )
                ok = r.returncode == 0
            except subprocess.TimeoutExpired:
                ok, hung = False, hung + 1
            times.append(round(time.monotonic() - t, 1) if ok else None)
        RESULTS["data"]["cupti_repeat_s"] = times
        check("cupti_repeat.no_hang", hung == 0 and all(times), f"{n} runs, wall seconds {times}")

    return body


def _find_ncu() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in (
        "/usr/local/cuda*/bin/ncu",
        "/opt/nvidia/nsight-compute/*/ncu",
        "/usr/local/cuda*/nsight-compute*/ncu",
    ):
        hits = sorted(Path("/").glob(pattern.lstrip("/")))
        if hits:
            return str(hits[-1])
    return None


def nvtx_ncu() -> None:
    ncu = _find_ncu()
    if ncu is None:
        check("nvtx_ncu", None, "ncu not found")
        return
    prog = program("cupy_nvtx.py", CUPY_NVTX)
    out = WORK / "nvtx.dlscope"
    cmd = [
        ncu,
        "--nvtx",
        "--nvtx-include",
        "compute/",
        "--csv",
        "--metrics",
        "gpu__time_duration.sum",
        "--target-processes",
        "all",
        sys.executable,
        "-m",
        "dlscope",
        "profile",
        "--nvtx",
        "--cupti",
        "on",
        "--quiet",
        "-o",
        str(out),
        "--",
        sys.executable,
        str(prog),
    ]
    r = run(cmd, 300, "ncu")
    (OUT / "ncu_nvtx.log").write_text(r.stdout[-20000:] + "\n---stderr---\n" + r.stderr[-20000:])
    profiled = [ln for ln in r.stdout.splitlines() if "dlscope_nvtx_" in ln]
    names = {n for n in ("dlscope_nvtx_inside", "dlscope_nvtx_outside") if any(n in ln for ln in profiled)}
    check(
        "nvtx_ncu.ranges",
        names == {"dlscope_nvtx_inside"},
        f"ncu --nvtx-include compute/ profiled {sorted(names) or 'nothing'} (expected only the kernel inside the"
        " phase)",
    )
    if not (out / "meta.json").exists():
        check("nvtx_ncu.cupti_steps_aside", False, "no profile was written under ncu")
        return
    m = meta(out)
    cu = m["collectors"].get("cupti", {})
    nv = m["collectors"].get("nvtx", {})
    RESULTS["data"]["nvtx_ncu"] = {"profiled_lines": profiled[:5], "cupti": cu, "nvtx": nv}
    check(
        "nvtx_ncu.cupti_steps_aside",
        cu.get("status") == "unavailable" and "CUPTI" in (cu.get("reason") or ""),
        f"cupti {cu.get('status')}: {cu.get('reason')}",
    )
    phases = sql(out, "SELECT count(*) AS n FROM phases WHERE name = 'compute'")[0]["n"]
    check(
        "nvtx_ncu.profile_kept",
        r.returncode == 0 and phases == 1 and nv.get("status") == "ok",
        f"dlscope still recorded its phase under ncu ({phases} 'compute'), nvtx {nv.get('status')}",
    )


# ---- main -------------------------------------------------------------------------------------------
QUICK = False


def main() -> int:
    global LOG, QUICK
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    ap.add_argument("--only", default="", help="comma-separated section names to run (default: all)")
    ap.add_argument(
        "--repeat-cupti",
        type=int,
        default=0,
        help=(
            "also run the CUPTI-path program under dlscope profile N more times, each with a "
            "60 s limit: a hang at exit shows up here"
        ),
    )
    args = ap.parse_args()
    QUICK = args.quick
    OUT.mkdir(parents=True, exist_ok=True)
    LOG = open(OUT / "gpu_hw_layer.log", "w")  # noqa: SIM115 - the script's whole run
    log(f"dlscope hardware-layer GPU validation; repo {REPO}; work dir {WORK}; out {OUT}")
    only = {n for n in args.only.split(",") if n}

    def want(name: str) -> bool:
        return not only or name in only or name.split(".")[0] in only

    section("preflight", preflight)
    for name, fn in (("nvml", nvml_probe), ("resnet50", resnet50), ("sampler_helper", sampler_helper)):
        if want(name):
            section(name, fn)
    for name, fn in (
        ("cupy_counts.on", cupy_counts("on")),
        ("cupy_counts.auto", cupy_counts("auto")),
        ("cupti_overhead.gpu", cupti_overhead("gpu", 2 if QUICK else 4, budget_pct=3.0)),
        ("cupti_overhead.launch", cupti_overhead("launch", 1 if QUICK else 2, budget_pct=None)),
        ("nvtx_ncu", nvtx_ncu),
    ):
        if want(name):
            section(name, fn)
    if args.repeat_cupti:
        section("cupti_repeat", cupti_repeat(args.repeat_cupti))
    RESULTS["data"]["elapsed_s"] = time.monotonic() - START
    RESULTS["date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (OUT / "gpu_hw_layer.json").write_text(json.dumps(RESULTS, indent=1, default=str))
    log("\n| check | result | detail |\n|---|---|---|")
    for name, c in RESULTS["checks"].items():
        log(f"| {name} | {c['status']} | {c['detail']} |")
    failed = [n for n, c in RESULTS["checks"].items() if c["status"] == "FAIL"]
    log(
        f"\n{len(RESULTS['checks']) - len(failed)} passed or skipped, {len(failed)} failed "
        f"in {RESULTS['data']['elapsed_s']:.0f} s; results in {OUT / 'gpu_hw_layer.json'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
