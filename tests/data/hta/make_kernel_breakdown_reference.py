"""Write kernel_breakdown.json: HTA's get_gpu_kernel_breakdown on the fixtures and HTA's corpus.

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_kernel_breakdown_reference.py \
        --shared ../shared > tests/data/hta/kernel_breakdown.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution (see make_reference.py).
The traces and step choices are make_reference.py's (``TRACES``).

HTA is called with ``num_kernels`` larger than any trace's kernel count and ``duration_ratio=1``,
so that it lists every kernel by name instead of folding the tail into "others". Each entry: the
trace (a path relative to the repository, or to ``shared``), whether HTA kept the kernels of the
last ProfilerStep, HTA's first frame (``types``: kernel type, time in us with overlaps split out
as HTA splits them, percentage; ``types_ns``: the same computed by HTA in ns, see
``types_in_ns``), and from its second frame, per rank and kernel type, the number of kernel names
and their total time (``totals``) and, per kernel type, the ``TOP`` names by total time over all
ranks with each rank's statistics from HTA (``kernels``: sum, max, min, mean, stddev in us; names
cut to ``NAME_CHARS`` characters to keep the file small, with the first 16 hex digits of the full
name's SHA-1 to match them by).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os

from make_reference import compact, trace_analyses

TOP = 3
NAME_CHARS = 48


def types_in_ns(ta) -> list[dict]:
    """HTA's time per kernel type (its first frame) computed by HTA's own code on the same kernels
    with their times in ns: HTA truncates each piece of its sweep to a whole number of time units
    (``.astype(int)``), which loses up to 1 us per piece in microseconds, 1 ns in nanoseconds."""
    import pandas as pd
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import KernelType, get_kernel_type

    sym = ta.t.symbol_table.get_sym_table()
    kinds = [KernelType.COMPUTATION.name, KernelType.COMMUNICATION.name, KernelType.MEMORY.name]
    parts = []
    for trace_df in ta.t.traces.values():  # as get_gpu_kernel_breakdown does, in ns
        k = trace_df[trace_df["stream"].ne(-1)].copy()
        k["kernel_type"] = k["name"].map(lambda i: get_kernel_type(sym[i]))
        k["ts"] = (k["ts"] * 1000).round()
        k["dur"] = (k["dur"] * 1000).round()
        parts.append(BreakdownAnalysis._get_gpu_kernel_type_time(k, kinds))
    t = pd.concat(parts).groupby("kernel_type")["sum"].sum()
    return [{"kernel_type": n, "sum (ns)": int(v)} for n, v in t.sort_values(ascending=False).items()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    entries = []
    for where, rel, include_last, ta in trace_analyses(args.shared):
        types, kernels = ta.get_gpu_kernel_breakdown(
            visualize=False, duration_ratio=1.0, num_kernels=10**9, include_memory_kernels=True
        )
        totals, top = [], []
        for ktype, g in kernels.groupby("kernel_type"):
            for rank, r in g.groupby("rank"):
                totals.append(
                    {"rank": int(rank), "kernel_type": ktype, "names": len(r), "sum (us)": float(r["sum (us)"].sum())}
                )
            # the TOP names by time over all ranks, with every rank's statistics for them
            names = g.groupby("name")["sum (us)"].sum().sort_index().sort_values(ascending=False, kind="stable")
            for r in g[g["name"].isin(names.index[:TOP])].to_dict(orient="records"):
                top.append(
                    {
                        "rank": int(r["rank"]),
                        "kernel_type": ktype,
                        "name": r["name"][:NAME_CHARS],
                        "name_sha1": hashlib.sha1(r["name"].encode()).hexdigest()[:16],
                        **{k: float(r[k]) for k in ("sum (us)", "max (us)", "min (us)", "mean (us)", "stddev")},
                    }
                )
        entries.append(
            {
                "location": where,
                "path": rel,
                "include_last_profiler_step": include_last,
                "types": json.loads(types.to_json(orient="records")),
                "types_ns": types_in_ns(ta),
                "totals": totals,
                "kernels": top,
            }
        )
    print(
        compact(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')} (pandas {version('pandas')})",
                "call": (
                    "TraceAnalysis(trace_dir, include_last_profiler_step).get_gpu_kernel_breakdown(visualize=False, "
                    "duration_ratio=1.0, num_kernels=10**9, include_memory_kernels=True)"
                ),
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python"
                    " tests/data/hta/make_kernel_breakdown_reference.py --shared ../shared >"
                    " tests/data/hta/kernel_breakdown.json"
                ),
                "ns_rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1",
                "top_kernels_per_rank_and_type": TOP,
                "name_chars": NAME_CHARS,
                "date": datetime.date.today().isoformat(),
                "entries": entries,
            }
        )
    )


if __name__ == "__main__":
    main()
