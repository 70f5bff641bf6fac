"""Benchmark (issue 39): a multi-rank job at scale, through every door, against HTA.

    python bench/make_big_job.py --out /tmp/scale/job            # 8 ranks x 1M events (not kept as data)
    python bench/scale_job.py --job /tmp/scale/job --work /tmp/scale/work
        [--parts import,commands,api,fleet,hta] [--fleet 64] [--hta-python /tmp/htavenv/bin/python]
        [--hta-timeout 1200] [--hta-memory-gb 10] [--out bench/results/scale_job.json]

Each part runs in its own process, timed (wall) with its peak memory: the largest resident set of
one process (``wait4``'s rusage: the process or any child it waited for) and the peak of the
process tree's summed RSS, sampled every 0.1 s (psutil; what several processes at once hold):
* ``import``: ``dlscope import JOB -o WORK/job.dlscope``;
* ``commands``: ``summary``, ``advise``, ``stats --report comm_sum,overlap,straggler`` and
  ``report -o r.html`` on that profile, each the first command on it (``DLSCOPE_NO_CACHE=1``: no
  results cache, so ``summary`` evaluates the advice it shows, and ``advise`` too);
* ``api``: ``dlscope.open(JOB)`` (the folder of per-rank traces, imported on the fly), then
  ``.summary()``, ``.advise()`` and ``.report()`` of the three reports; then ``dlscope.open`` of a
  folder holding the job's profile and one rank's profile: ``.summary()``, ``.advise()`` and
  ``.report("comm_sum")`` per profile;
* ``fleet``: one rank imported alone (about 1M events), ``--fleet`` hard-linked copies of it in a
  folder, then one query (kernel time by profile and name) through
  ``dlscope.application.fleet_dask.read_table`` on Dask's local cluster (2 workers of 1 thread,
  processes) and through ``dlscope sql FOLDER``;
* ``hta``: HTA's ``TraceAnalysis(trace_dir=JOB)`` and ``get_temporal_breakdown()`` in its own
  venv, stopped at ``--hta-timeout`` seconds or when its processes hold more than
  ``--hta-memory-gb`` together (the machine is shared): then "did not finish" and how far it got.

Writes the JSON to ``--out`` and prints a Markdown table. Big data stays under ``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402

PY = sys.executable
REPORTS = ("comm_sum", "overlap", "straggler")

API_JOB = r"""
import json, sys, time
t = time.perf_counter()
import dlscope
out = {}
def lap(name):
    global t
    now = time.perf_counter(); out[name] = round(now - t, 2); t = now
job, profiles, reports, result = sys.argv[1], sys.argv[2], sys.argv[3].split(","), sys.argv[4]
with dlscope.open(job) as p:
    lap("open_job_folder_s")
    s = p.summary(); lap("summary_s")
    out["steps"], out["ranks"] = s.steps.count, len(p.data.meta.ranks)
    f = p.advise(); lap("advise_s"); out["findings"] = [x.id.value for x in f]
    for r in reports:
        p.report(r)
    lap("reports_s")
with dlscope.open(profiles) as p:
    lap("open_profiles_folder_s")
    s = p.summary(); lap("profiles_summary_s"); out["profiles"] = len(s)
    p.advise(); lap("profiles_advise_s")
    p.report("comm_sum"); lap("profiles_report_s")
print(json.dumps(out))
open(result, "w").write(json.dumps(out))
"""

FLEET_JOB = r"""
import json, subprocess, sys, time
folder = sys.argv[1]
from distributed import Client, LocalCluster
from dlscope.application.fleet_dask import read_table
t = time.perf_counter()
cluster = LocalCluster(processes=True, n_workers=2, threads_per_worker=1, dashboard_address=None)
client = Client(cluster)
start = time.perf_counter() - t
t = time.perf_counter()
k = read_table(folder, "kernels")
k = k.assign(dur=k.end_ns - k.start_ns)
agg = k.groupby(["profile", "name"]).dur.agg(["count", "sum"]).compute()
dask_s = time.perf_counter() - t
client.close(); cluster.close()
print(json.dumps({"dask_cluster_start_s": round(start, 2), "dask_query_s": round(dask_s, 2), "rows": len(agg),
                  "kernels": int(agg["count"].sum())}))
"""

FLEET_SQL = (
    "select profile, name, count(*) as n, sum(end_ns - start_ns)::BIGINT as total_ns "
    "from kernels group by all order by profile, total_ns desc"
)

HTA_JOB = r"""
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
print(json.dumps({"stage": "loaded", "load_s": round(t1 - t0, 2)}), flush=True)
b = a.get_temporal_breakdown(visualize=False)
t2 = time.perf_counter()
print(json.dumps({"stage": "done", "load_s": round(t1 - t0, 2), "temporal_breakdown_s": round(t2 - t1, 2),
                  "ranks": len(b)}), flush=True)
"""


def measure(
    cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None, memory_gb: float | None = None
) -> dict[str, Any]:
    """Run ``cmd``; wall time, peak RSS (largest one process; sampled sum over its tree), exit,
    stdout's last line parsed when JSON. Stopped (its whole process group) at ``timeout`` or when
    the tree holds more than ``memory_gb``."""
    import psutil

    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    proc = psutil.Process(p.pid)
    peak_tree = 0
    stopped = None
    out_lines: list[str] = []
    import threading

    def drain() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            out_lines.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    err_tail: list[str] = []

    def drain_err() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            err_tail.append(line)
            del err_tail[:-20]

    err_reader = threading.Thread(target=drain_err, daemon=True)
    err_reader.start()
    rusage = None
    status = 0
    while True:
        pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        try:
            tree = [proc, *proc.children(recursive=True)]
            rss = 0
            for q in tree:
                try:
                    rss += q.memory_info().rss
                except psutil.Error:
                    pass
            peak_tree = max(peak_tree, rss)
        except psutil.Error:
            pass
        elapsed = time.perf_counter() - t0
        if stopped is None and timeout is not None and elapsed > timeout:
            stopped = f"timeout after {timeout:.0f} s"
        if stopped is None and memory_gb is not None and peak_tree > memory_gb * 2**30:
            stopped = f"stopped at {memory_gb:g} GiB of its processes' memory after {elapsed:.0f} s"
        if stopped:
            os.killpg(p.pid, signal.SIGKILL)
            _, status, rusage = os.wait4(p.pid, 0)
            break
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    reader.join(5)
    err_reader.join(5)
    p.returncode = os.waitstatus_to_exitcode(status)
    res: dict[str, Any] = {
        "cmd": " ".join("<script>" if i and cmd[i - 1] == "-c" else c for i, c in enumerate(cmd)),
        "wall_s": round(wall, 2),
        "peak_rss_mb": round(rusage.ru_maxrss / 1024) if rusage else None,
        "peak_tree_rss_mb": round(peak_tree / 2**20),
        "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 2) if rusage else None,
        "exit": p.returncode,
    }
    if stopped:
        res["did_not_finish"] = stopped
    for line in reversed(out_lines):
        try:
            res["result"] = json.loads(line)
            break
        except ValueError:
            continue
    if p.returncode and not stopped:
        res["stderr_tail"] = "".join(err_tail)[-2000:]
    return res


def dlscope(*args: str) -> list[str]:
    return ["nice", "-n", "10", PY, "-m", "dlscope", *args]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", required=True, help="folder of per-rank Kineto traces (bench/make_big_job.py)")
    ap.add_argument("--work", required=True, help="folder for the profiles (created; large)")
    ap.add_argument("--parts", default="import,commands,api,fleet,hta")
    ap.add_argument("--fleet", type=int, default=64, help="profiles in the Dask fleet")
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--hta-timeout", type=float, default=1200)
    ap.add_argument("--hta-memory-gb", type=float, default=10)
    ap.add_argument("--out", default=str(HERE / "results" / "scale_job.json"))
    args = ap.parse_args()
    parts = args.parts.split(",")
    job, work = Path(args.job).resolve(), Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    profile = work / "job.dlscope"
    traces = sorted(job.glob("*.json.gz"))
    report: dict[str, Any] = {
        "benchmark": "scale_job",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine.describe(),
        "load_avg_before": os.getloadavg(),
        "job": str(job),
        "traces": len(traces),
        "trace_mb": round(sum(f.stat().st_size for f in traces) / 1e6, 1),
        "command": " ".join(["python", *sys.argv]),
        "runs": {},
    }
    made = job.with_name(job.name + ".json")
    if made.exists():
        made_info = json.loads(made.read_text())
        report["events"] = sum(r["events"] for r in made_info["ranks"])
        report["events_per_rank"] = [r["events"] for r in made_info["ranks"]]
    runs = report["runs"]
    nocache = {"DLSCOPE_NO_CACHE": "1"}

    def record(name: str, res: dict[str, Any]) -> None:
        runs[name] = res
        extra = f" DID NOT FINISH: {res['did_not_finish']}" if "did_not_finish" in res else ""
        print(
            f"{name}: {res['wall_s']} s, peak {res['peak_rss_mb']} MB (tree {res['peak_tree_rss_mb']} MB), "
            f"exit {res['exit']}{extra}",
            flush=True,
        )
        Path(args.out).write_text(json.dumps(report, indent=1))

    if "import" in parts:
        record("import", measure(dlscope("import", str(job), "-o", str(profile), "-f"), nocache))
        report["profile_mb"] = round(sum(f.stat().st_size for f in profile.rglob("*") if f.is_file()) / 1e6, 1)
    if "commands" in parts:
        for name, cmd in (
            ("summary", ["summary", str(profile)]),
            ("advise", ["advise", str(profile)]),
            ("stats", ["stats", str(profile), "--report", ",".join(REPORTS)]),
            ("report", ["report", str(profile), "-o", str(work / "r.html")]),
        ):
            record(name, measure(dlscope(*cmd), nocache))
    if "api" in parts or "fleet" in parts:
        one = work / "rank0.dlscope"
        if not one.exists():
            record("import_one_rank", measure(dlscope("import", str(traces[0]), "-o", str(one), "-f"), nocache))
    if "api" in parts:
        folder = work / "profiles"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for src in (profile, work / "rank0.dlscope"):
            subprocess.run(["cp", "-al", str(src), str(folder / src.name)], check=True)
        api = ["nice", "-n", "10", PY, "-c", API_JOB, str(job), str(folder), ",".join(REPORTS), str(work / "api.json")]
        res = measure(api, nocache)
        if "result" not in res and (work / "api.json").exists():  # its stdout's last line was lost once
            res["result"] = json.loads((work / "api.json").read_text())
        record("api", res)
        shutil.rmtree(folder, ignore_errors=True)
    if "fleet" in parts:
        fleet = work / "fleet"
        shutil.rmtree(fleet, ignore_errors=True)
        fleet.mkdir()
        for i in range(args.fleet):  # hard links: no disk
            subprocess.run(["cp", "-al", str(work / "rank0.dlscope"), str(fleet / f"p{i:02d}.dlscope")], check=True)
        record("fleet_dask", measure(["nice", "-n", "10", PY, "-c", FLEET_JOB, str(fleet)]))
        record("fleet_sql", measure(dlscope("sql", str(fleet), FLEET_SQL, "--format", "json")))
        runs["fleet_sql"].pop("result", None)  # the rows themselves
        shutil.rmtree(fleet, ignore_errors=True)
    if "hta" in parts:
        if not Path(args.hta_python).exists():
            runs["hta"] = {"skipped": f"no HTA at {args.hta_python}"}
        else:
            ver = subprocess.run(
                [args.hta_python, "-m", "pip", "show", "HolisticTraceAnalysis"], capture_output=True, text=True
            ).stdout
            report["hta_version"] = next((ln.split()[1] for ln in ver.splitlines() if ln.startswith("Version")), None)
            record(
                "hta",
                measure(
                    ["nice", "-n", "10", args.hta_python, "-c", HTA_JOB, str(job)],
                    timeout=args.hta_timeout,
                    memory_gb=args.hta_memory_gb,
                ),
            )
    report["load_avg_after"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(report, indent=1))
    print("\n| step | wall s | peak RSS MB (one process) | peak MB (all its processes) |\n|---|---:|---:|---:|")
    for name, r in runs.items():
        if "wall_s" in r:
            note = f" (did not finish: {r['did_not_finish']})" if "did_not_finish" in r else ""
            print(f"| {name}{note} | {r['wall_s']} | {r['peak_rss_mb']} | {r['peak_tree_rss_mb']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
