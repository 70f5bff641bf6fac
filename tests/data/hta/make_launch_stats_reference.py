"""Write launch_stats.json: HTA's get_cuda_kernel_launch_stats on the fixtures and HTA's corpus.

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_launch_stats_reference.py \
        --shared ../shared > tests/data/hta/launch_stats.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution (see make_reference.py).
The traces and step choices are make_reference.py's (``TRACES``), every rank of each.

HTA returns one row per launch (correlation id): the launch call's duration (``cpu_duration``),
the launched work's (``gpu_duration``), and ``launch_delay``, the GPU start minus the *end* of the
call, clipped at 0. It takes the launches of four runtime calls only: cudaLaunchKernel,
cudaLaunchKernelExC, cudaMemcpyAsync and cudaMemsetAsync (and MTIA's runFunction). Its rows are
too many to keep, so each entry keeps, per rank and per launching call (the call's name from
HTA's own parsed trace, joined on the correlation id), statistics of HTA's three columns:
count, sum, mean, p50, p95, max (percentiles interpolated linearly, as numpy and pandas do),
plus, from the same parsed trace, the launches whose work is a kernel (``kernels``,
``kernel_sum``: GPU work that HTA's ``get_kernel_type`` does not call MEMORY), and the
start-to-start delay (GPU start minus the call's start: what dlscope's
``launch_sum`` calls delay; it equals HTA's ``launch_delay + cpu_duration`` where HTA did not
clip) as ``start_delay``, with ``clipped``, the rows HTA clipped to 0. All times in us.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os

from make_reference import compact, trace_analyses


def stats(s) -> dict:
    return {
        "sum": float(s.sum()),
        "mean": float(s.mean()),
        "p50": float(s.quantile(0.5)),
        "p95": float(s.quantile(0.95)),
        "max": float(s.max()),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    import pandas as pd
    from hta.utils.utils import KernelType, get_kernel_type

    entries = []
    for where, rel, include_last, ta in trace_analyses(args.shared):
        ranks = sorted(ta.t.traces)
        result = ta.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
        sym = ta.t.symbol_table.get_sym_table()
        rows = []
        for rank in ranks:
            df = result[rank]
            if df.empty:
                continue
            trace_df = ta.t.get_trace(rank)
            cpu = trace_df[trace_df["stream"].eq(-1) & trace_df["correlation"].isin(df["correlation"])]
            gpu = trace_df[trace_df["stream"].ne(-1) & trace_df["correlation"].isin(df["correlation"])]
            # HTA's result joins calls and GPU work on the correlation id alone: the same join here
            j = df.merge(cpu[["correlation", "name", "ts", "dur"]], on="correlation")
            gpu = gpu[["correlation", "name", "ts", "dur"]].rename(
                columns={"name": "gname", "ts": "gts", "dur": "gdur"}
            )
            j = j.merge(gpu, on="correlation")
            j = j[(j["dur"] == j["cpu_duration"]) & (j["gdur"] == j["gpu_duration"])].drop_duplicates()
            assert len(j) == len(df), (rel, rank, len(j), len(df))
            j["call"] = j["name"].map(sym.__getitem__)
            j["start_delay"] = j["gts"] - j["ts"]
            for call, g in j.groupby("call"):
                k = g[g["gname"].map(sym.__getitem__).map(get_kernel_type) != KernelType.MEMORY.name]
                rows.append(
                    {
                        "rank": int(rank),
                        "call": call,
                        "count": len(g),
                        "kernels": len(k),
                        "kernel_sum": float(k["gpu_duration"].sum()),
                        "cpu_duration": stats(g["cpu_duration"]),
                        "gpu_duration": stats(g["gpu_duration"]),
                        "launch_delay": stats(g["launch_delay"]),
                        "start_delay": stats(g["start_delay"]),
                        "clipped": int((g["gts"] < g["ts"] + g["dur"]).sum()),
                    }
                )
        entries.append(
            {
                "location": where,
                "path": rel,
                "include_last_profiler_step": include_last,
                "ranks": [int(r) for r in ranks],
                "rows": rows,
            }
        )
    print(
        compact(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')} (pandas {pd.__version__})",
                "call": (
                    "TraceAnalysis(trace_dir, include_last_profiler_step).get_cuda_kernel_launch_stats("
                    "ranks=<every rank>, visualize=False)"
                ),
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_launch_stats_reference.py "
                    "--shared ../shared > tests/data/hta/launch_stats.json"
                ),
                "ns_rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1",
                "date": datetime.date.today().isoformat(),
                "entries": entries,
            }
        )
    )


if __name__ == "__main__":
    main()
