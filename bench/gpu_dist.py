"""GPU run for distributed profiling (issue 13): 2 GPUs, NCCL, DDP. Runs on nvidia-h200-x2:

    python3 bench/gpu_dist.py            (everything under $OUT: gpu_dist.json, gpu_dist.log, profiles.tar.gz)

1. Bare: `torchrun --nproc-per-node 2 examples/ddp_train.py` (an 8-layer 4096-wide MLP, DDP,
   NCCL), step times from the program itself (rank 0, synchronized each step).
2. The same under `dlscope profile -- python -m torch.distributed.run ...` (default mode): one
   profile with both ranks, NCCL kernels and collectives with sizes on both, GPU counters per
   rank; overhead = median untraced step time vs bare (the program's own timings, steps after
   the traced window).
3. With a straggler: rank 1 sleeps 20 ms per step inside its 'data' phase: the straggler report
   must name rank 1 (lag about 20 ms, phase 'data') and the straggler rule must fire; without
   it, the rule must stay silent.
4. The reports comm_sum, overlap, straggler, rank_balance and the advice, as JSON.
Each part is caught on its own; errors land in the JSON. Finishes in about 2 minutes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(os.environ.get("OUT", "/tmp/out"))
OUT.mkdir(parents=True, exist_ok=True)
WORK = Path("/tmp/gpu_dist")
WORK.mkdir(parents=True, exist_ok=True)
LOG = (OUT / "gpu_dist.log").open("w")  # noqa: SIM115 - written through the whole run
STEPS = int(os.environ.get("STEPS", "60"))  # STEPS=12 HIDDEN=256 LAYERS=2: a quick CPU (Gloo) smoke run
TRACED_UNTIL = 6  # default mode: warm-up step 0 and 5 traced steps; later steps run untraced
PROGRAM = [
    str(REPO / "examples" / "ddp_train.py"),
    "--steps",
    str(STEPS),
    "--hidden",
    os.environ.get("HIDDEN", "4096"),
    "--layers",
    os.environ.get("LAYERS", "8"),
    "--batch",
    "64",
]
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
results: dict = {"errors": {}}


def log(*a: object) -> None:
    print(*a, file=LOG, flush=True)


def run(cmd: list[str], timeout: int = 150) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(REPO / "src")) if p)
    log("$", " ".join(cmd))
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    log(f"  rc={p.returncode} in {time.perf_counter() - t:.1f}s")
    log(p.stdout[-4000:])
    log(p.stderr[-4000:])
    return p


def dlscope(*args: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "dlscope", *args])


def sql(profile: Path, query: str) -> list:
    p = dlscope("sql", str(profile), query, "--format", "json")
    return json.loads(p.stdout) if p.returncode == 0 else [{"error": p.stderr.strip()[-500:]}]


def part(name: str):
    def wrap(fn):
        try:
            t = time.perf_counter()
            fn()
            results.setdefault("seconds", {})[name] = round(time.perf_counter() - t, 1)
        except Exception as e:  # record and go on: one part must not lose the others
            results["errors"][name] = f"{e.__class__.__name__}: {e}"
            log(traceback.format_exc())
        return fn

    return wrap


def median_ms(times_file: Path, first: int) -> float | None:
    if not times_file.exists():
        return None
    ts = json.loads(times_file.read_text())[first:]
    return round(1e3 * statistics.median(ts), 3) if ts else None


try:
    import torch

    results["torch"] = torch.__version__
    results["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
except Exception as e:  # noqa: BLE001
    results["errors"]["torch"] = str(e)


@part("bare")
def _bare() -> None:
    for i in range(2):  # two bare runs: the spread between them is the noise floor
        p = run([*LAUNCH, *PROGRAM, "--times-out", str(WORK / f"bare{i}.json")])
        results[f"bare{i}_rc"] = p.returncode
        results[f"bare{i}_median_step_ms"] = median_ms(WORK / f"bare{i}.json", TRACED_UNTIL + 1)


def check_profile(name: str, path: Path) -> dict:
    r: dict = {}
    r["ranks_meta"] = json.loads((path / "meta.json").read_text()).get("ranks")
    r["steps_per_rank"] = sql(path, "select rank, count(*) as n from steps group by 1 order by 1")
    r["nccl_kernels_per_rank"] = sql(
        path,
        "select rank, device, count(*) as n, sum(end_ns - start_ns) / 1e6 as ms "
        "from kernels where lower(name) like 'nccl%' group by all order by 1",
    )
    r["comms"] = sql(
        path,
        'select rank, name, "where", in_bytes, group_size, group_ranks, count(*) as n '
        "from comms group by all order by 1, 2",
    )
    r["counters_per_rank"] = sql(path, "select rank, device, count(*) as n from counters group by all order by 1, 2")
    for report in ("comm_sum", "overlap", "straggler", "rank_balance", "gpu_time_breakdown"):
        p = dlscope("stats", str(path), "--report", report, "--format", "json")
        r[report] = json.loads(p.stdout) if p.returncode == 0 else {"error": p.stderr.strip()[-500:]}
    p = dlscope("advise", str(path), "--format", "json")
    try:
        findings = json.loads(p.stdout)
        findings = findings.get("findings", findings) if isinstance(findings, dict) else findings
        r["advice"] = [{k: f.get(k) for k in ("id", "title", "saving_ms_per_step", "evidence")} for f in findings]
    except ValueError:
        r["advice"] = {"error": p.stderr.strip()[-500:]}
    return r


def profiled(name: str, extra: list[str]) -> None:
    path = WORK / f"{name}.dlscope"
    times = WORK / f"{name}_times.json"
    t = time.perf_counter()
    p = dlscope("profile", "-o", str(path), "-f", "--quiet", "--", *LAUNCH, *PROGRAM, *extra, "--times-out", str(times))
    results[name] = {
        "rc": p.returncode,
        "wall_s": round(time.perf_counter() - t, 1),
        "median_untraced_step_ms": median_ms(times, TRACED_UNTIL + 1),
    }
    results[name].update(check_profile(name, path))


@part("profiled")
def _profiled() -> None:
    profiled("profiled", [])


@part("straggler")
def _straggler() -> None:
    profiled("straggler", ["--slow-rank", "1", "--sleep-ms", "20"])


@part("summary")
def _summary() -> None:
    bare = [results.get(f"bare{i}_median_step_ms") for i in range(2)]
    bare = [b for b in bare if b]
    prof = (results.get("profiled") or {}).get("median_untraced_step_ms")
    if bare and prof:
        results["overhead_untraced_pct"] = round(100 * (prof / min(bare) - 1), 2)
        results["bare_noise_pct"] = round(100 * (max(bare) / min(bare) - 1), 2)
    s = results.get("straggler") or {}
    rows = s.get("straggler") if isinstance(s.get("straggler"), list) else []
    results["straggler_rows"] = rows
    named = [r for r in rows if r.get("slowest_rank") == 1]
    results["checks"] = {
        "both_ranks": (results.get("profiled") or {}).get("ranks_meta") == [0, 1],
        "straggler_named_in_steps": f"{len(named)} of {len(rows)}",
        "straggler_median_lag_ms": statistics.median([r["lag_ms"] for r in named]) if named else None,
        "straggler_phases": sorted({str(r.get("phase")) for r in named}),
        "straggler_rule_fires": any(f.get("id") == "straggler" for f in s.get("advice") or []),
        "straggler_rule_silent_without": not any(
            f.get("id") == "straggler" for f in (results.get("profiled") or {}).get("advice") or []
        ),
    }


(OUT / "gpu_dist.json").write_text(json.dumps(results, indent=1, default=str))
try:
    with tarfile.open(OUT / "profiles.tar.gz", "w:gz") as tar:
        for name in ("profiled", "straggler"):
            if (WORK / f"{name}.dlscope").exists():
                tar.add(WORK / f"{name}.dlscope", arcname=f"{name}.dlscope")
except Exception as e:  # noqa: BLE001
    log("tar failed:", e)
print(
    json.dumps({k: results.get(k) for k in ("overhead_untraced_pct", "bare_noise_pct", "checks", "errors")}, indent=1)
)
