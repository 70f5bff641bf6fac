"""Benchmark: a long run under the default mode keeps bounded memory and a small profile.

Runs ``bench/programs/long_train.py`` (many small PyTorch steps with phases, on the GPU when
there is one) under ``dlscope profile`` for ``--seconds``, sampling every ``--every`` seconds the
resident memory (VmRSS) of the dlscope process and of the program, and the size of the spool on
disk. Then: the finalize time (dlscope's exit after the program's), the profile's size, the
size extrapolated to one hour from the spool's growth rate after the traced window, and the
times and sizes of ``dlscope summary`` and ``dlscope report`` on the result.

    python bench/long_run.py [--seconds 300] [--every 5] [--out bench/results/long_run.json]

On the GPU machine (about 11 minutes of device time for a 10-minute run):
    OUT=$OUT python3 bench/long_run.py --seconds 600 --out $OUT/long_run.json
Needs torch and dlscope's dependencies; writes only under --out's folder (and a temporary
folder it removes).
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

PROGRAM = HERE / "programs" / "long_train.py"


def rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def du_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total / 1e6


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t, r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--every", type=float, default=5.0)
    ap.add_argument("--wait", type=float, default=0.004, help="the program's data wait per step, s")
    ap.add_argument("--out", default=str(HERE / "results" / "long_run.json"))
    ap.add_argument("--keep", help="copy the profile to this directory (default: removed with the run)")
    args = ap.parse_args()
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dlscope-long-"))
    prof = work / "long.dlscope"
    env = dict(os.environ)
    env.pop("DLSCOPE_SESSION", None)
    src = str(HERE.parent / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    report: dict = {
        "benchmark": "long_run",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine.describe(),
        "seconds": args.seconds,
        "command": " ".join(["python", *sys.argv]),
        "errors": [],
    }
    samples = []
    try:
        with open(os.devnull) as devnull:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dlscope",
                    "profile",
                    "-o",
                    str(prof),
                    "--quiet",
                    "--",
                    sys.executable,
                    str(PROGRAM),
                    str(args.seconds),
                    str(args.wait),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=devnull,
                text=True,
                env=env,
            )
        t0 = time.monotonic()
        program_done = None
        while proc.poll() is None:
            kids = children(proc.pid)
            t = time.monotonic() - t0
            if not kids and program_done is None and t > 5:
                program_done = t  # the program exited: dlscope is finalizing
            samples.append(
                {
                    "t_s": round(t, 1),
                    "dlscope_rss_mb": rss_mb(proc.pid),
                    "program_rss_mb": max((rss_mb(k) or 0 for k in kids), default=None),
                    "spool_mb": round(du_mb(prof / "spool"), 3) if (prof / "spool").is_dir() else None,
                }
            )
            time.sleep(args.every if t < args.seconds - args.every else 0.5)
        total = time.monotonic() - t0
        stdout, stderr = proc.communicate()
        report["exit_code"] = proc.returncode
        report["program_stdout"] = stdout.strip()[-200:]
        if proc.returncode != 0:
            report["errors"].append(f"dlscope profile exited {proc.returncode}: {stderr.strip()[-1000:]}")
        report["total_s"] = round(total, 2)
        report["finalize_s_upper_bound"] = round(total - program_done, 2) if program_done else None
        report["samples"] = samples
        prog = [s["program_rss_mb"] for s in samples if s["program_rss_mb"]]
        dls = [s["dlscope_rss_mb"] for s in samples if s["dlscope_rss_mb"]]
        half = len(prog) // 2
        report["program_rss_mb"] = {
            "first_quarter_median": statistics.median(prog[: max(1, len(prog) // 4)]) if prog else None,
            "last_quarter_median": statistics.median(prog[-max(1, len(prog) // 4) :]) if prog else None,
            "max": max(prog) if prog else None,
            "second_half_growth_mb": (prog[-1] - prog[half]) if len(prog) > 2 else None,
        }
        report["dlscope_rss_mb"] = {
            "max": max(dls) if dls else None,
            "last_quarter_median": statistics.median(dls[-max(1, len(dls) // 4) :]) if dls else None,
        }
        # spool growth after the traced window (the first 20% of the run), extrapolated to 1 h
        sp = [(s["t_s"], s["spool_mb"]) for s in samples if s["spool_mb"] is not None and s["t_s"] > 0.2 * args.seconds]
        if len(sp) >= 2 and sp[-1][0] > sp[0][0]:
            rate = (sp[-1][1] - sp[0][1]) / (sp[-1][0] - sp[0][0])  # MB/s
            report["spool_mb_per_hour"] = round(rate * 3600, 2)
        if (prof / "meta.json").exists():
            meta = json.loads((prof / "meta.json").read_text())
            size = du_mb(prof)
            report["profile_mb"] = round(size, 3)
            report["table_rows"] = meta.get("table_rows")
            report["profile_mb_per_hour_linear"] = round(size * 3600 / args.seconds, 2)
            for name, cmd in (
                ("summary", ["summary", str(prof), "--format", "json"]),
                ("report", ["report", str(prof), "-o", str(work / "r.html"), "-f"]),
            ):
                secs, r = timed([sys.executable, "-m", "dlscope", *cmd], env)
                report[f"{name}_s"] = round(secs, 2)
                if r.returncode:
                    report["errors"].append(f"{name}: {r.stderr.strip()[-500:]}")
            if (work / "r.html").exists():
                report["report_mb"] = round((work / "r.html").stat().st_size / 1e6, 3)
            if args.keep:
                shutil.copytree(prof, args.keep, dirs_exist_ok=True)
    except Exception as e:  # a benchmark part failing must still leave its numbers
        report["errors"].append(f"{e.__class__.__name__}: {e}")
    finally:
        out_path.write_text(json.dumps(report, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    keys = (
        "total_s",
        "finalize_s_upper_bound",
        "program_rss_mb",
        "dlscope_rss_mb",
        "profile_mb",
        "profile_mb_per_hour_linear",
        "spool_mb_per_hour",
        "summary_s",
        "report_s",
        "report_mb",
        "errors",
    )
    print(json.dumps({k: report.get(k) for k in keys}, indent=1))
    return 0 if not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
