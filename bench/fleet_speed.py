"""Benchmark: one query over a fleet of 50 profiles, dlscope sql vs Dask vs one profile at a time.

Imports the ResNet-50 H100 trace bundled with the tests (24k events) once, copies the profile 50
times (each copy's kernel durations stretched by its own factor, so the answers differ), then
times, each REPS times and alternating:

* ``dlscope sql FOLDER QUERY`` in a fresh process (interpreter start-up included);
* the same aggregation through ``dlscope.application.fleet_dask.read_table`` on Dask's local cluster
  (threads, 2 workers' worth), cluster start-up excluded and reported apart;
* ``dlscope sql PROFILE QUERY`` for each of the 50 profiles in turn (what one would do without
  fleet support).

    python bench/fleet_speed.py [--profiles 50] [--reps 3]

Writes bench/results/fleet_speed.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import machine  # noqa: E402

TRACE = HERE.parent / "tests" / "data" / "kineto" / "h100_resnet50_phases.trace.json.gz"
QUERY = (
    "select profile, name, count(*) as n, sum(end_ns - start_ns)::BIGINT as total_ns "
    "from kernels group by all order by profile, total_ns desc"
)
ONE = "select name, count(*) as n, sum(end_ns - start_ns)::BIGINT as total_ns from kernels group by all"


def make_fleet(root: Path, n: int) -> None:
    import duckdb

    from dlscope.importers.run import import_files

    base = import_files([TRACE], root / "base.dlscope")
    for i in range(n):
        out = root / "runs" / f"p{i:02d}.dlscope"
        shutil.copytree(base, out)
        con = duckdb.connect()
        con.execute(f"""COPY (SELECT * REPLACE (start_ns + (end_ns - start_ns) * {100 + i} // 100 AS end_ns)
                              FROM read_parquet('{base / "kernels.parquet"}'))
                        TO '{out / "kernels.parquet"}' (FORMAT parquet)""")
        con.close()


def cli(*args: str) -> tuple[float, str]:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dlscope", *args], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stderr)
    return time.perf_counter() - t, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profiles", type=int, default=50)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "fleet_speed.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dlscope-fleet-"))
    try:
        make_fleet(work, args.profiles)
        runs = work / "runs"
        res: dict[str, list[float]] = {"dlscope_sql_folder": [], "dask_local": [], "one_profile_at_a_time": []}
        rows = {}
        from distributed import Client, LocalCluster

        from dlscope.application.fleet_dask import read_table

        t = time.perf_counter()
        cluster = LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None)
        client = Client(cluster)
        dask_start = time.perf_counter() - t
        for _ in range(args.reps):
            secs, out = cli("sql", str(runs), QUERY, "--format", "json")
            res["dlscope_sql_folder"].append(secs)
            rows["dlscope"] = len(json.loads(out))
            t = time.perf_counter()
            k = read_table(str(runs), "kernels")
            k = k.assign(dur=k.end_ns - k.start_ns)
            agg = k.groupby(["profile", "name"]).dur.agg(["count", "sum"]).compute()
            res["dask_local"].append(time.perf_counter() - t)
            rows["dask"] = len(agg)
            t = time.perf_counter()
            n = 0
            for p in sorted(runs.iterdir()):
                n += len(json.loads(cli("sql", str(p), ONE, "--format", "json")[1]))
            res["one_profile_at_a_time"].append(time.perf_counter() - t)
            rows["one_at_a_time"] = n
        client.close()
        cluster.close()
        size = sum(f.stat().st_size for f in runs.rglob("*") if f.is_file())
        report = {
            "benchmark": "fleet_speed",
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "machine": machine.describe(),
            "load_avg": os.getloadavg(),
            "profiles": args.profiles,
            "fleet_mb": round(size / 1e6, 2),
            "query": QUERY,
            "rows": rows,
            "dask_cluster_start_s": dask_start,
            "runs": res,
            "median_s": {k: statistics.median(v) for k, v in res.items()},
            "command": " ".join(["python", *sys.argv]),
        }
        Path(args.out).write_text(json.dumps(report, indent=1))
        print(f"{args.profiles} profiles, {report['fleet_mb']} MB; rows {rows}\n")
        print("| how | median s |\n|---|---:|")
        for k, v in report["median_s"].items():
            print(f"| {k} | {v:.2f} |")
        print(f"\nDask local cluster start-up (not included): {dask_start:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
