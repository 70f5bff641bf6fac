"""Write idle_time_breakdown.json: HTA's get_idle_time_breakdown on the fixtures and HTA's corpus.

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv4/bin/python tests/data/hta/make_idle_time_reference.py \
        --shared ../shared > tests/data/hta/idle_time_breakdown.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution (see make_reference.py).
The traces and step choices are make_reference.py's (``TRACES``). HTA is asked for every rank and
stream with its default ``consecutive_kernel_delay`` (30, in the trace's unit: us for Kineto
traces, although HTA's docstring says nanoseconds).

Each entry: the trace (a path relative to the repository, or to ``shared``), whether HTA kept the
GPU work of the last ProfilerStep, and HTA's rows (rank, stream, idle_category, idle_time in us,
idle_time_ratio: the category's share of the stream's idle time).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os

from make_reference import trace_analyses


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    entries = []
    for where, rel, include_last, ta in trace_analyses(args.shared):
        try:
            df, _ = ta.get_idle_time_breakdown(ranks=ta.t.get_ranks(), visualize=False)
            rows, error = json.loads(df.to_json(orient="records")), None
        except Exception as e:  # noqa: BLE001 - HTA fails on some traces: recorded, not fatal
            rows, error = [], f"{type(e).__name__}: {e}"
        entry = {"location": where, "path": rel, "include_last_profiler_step": include_last, "rows": rows}
        if error:
            entry["error"] = error
        entries.append(entry)
    print(
        json.dumps(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')}",
                "call": (
                    "TraceAnalysis(trace_dir, include_last_profiler_step).get_idle_time_breakdown(ranks,"
                    " visualize=False)[0]"
                ),
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv4/bin/python tests/data/hta/make_idle_time_reference.py "
                    "--shared ../shared > tests/data/hta/idle_time_breakdown.json"
                ),
                "ns_rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1",
                "consecutive_kernel_delay": 30,
                "date": datetime.date.today().isoformat(),
                "entries": entries,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
