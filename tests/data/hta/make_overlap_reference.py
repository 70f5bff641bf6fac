"""Write comm_comp_overlap.json: HTA's get_comm_comp_overlap on every trace of HTA's corpus that
has communication kernels (the two-rank trace_filter set among them).

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_overlap_reference.py \
        --shared ../shared > tests/data/hta/comm_comp_overlap.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution (see make_reference.py).
HTA reads every trace file of a folder as one job, one rank per file, and by default leaves out
the GPU work of each trace's last ProfilerStep. Each entry: the folder (relative to ``shared``),
whether the last ProfilerStep was included, and HTA's rows (rank, overlap ratio and percentage).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
from pathlib import Path

# (folder, include_last_profiler_step)
TRACES = [
    ("corpus/hta/trace_filter", False),
    ("corpus/hta/trace_filter", True),
    ("corpus/hta/timeline_analysis", False),
    ("corpus/hta/nccl_parser_config", False),
    ("corpus/hta/nccl_parser_config", True),
    ("corpus/hta/trace_diff/control", False),
    ("corpus/hta/trace_diff/test", False),
    ("corpus/hta/negative_queue_length_values_check", False),
    ("corpus/hta/df_index_resolver", False),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    from hta.trace_analysis import TraceAnalysis

    entries = []
    for rel, include_last in TRACES:
        ta = TraceAnalysis(trace_dir=str(Path(args.shared) / rel), include_last_profiler_step=include_last)
        df = ta.get_comm_comp_overlap(visualize=False)
        entries.append(
            {"path": rel, "include_last_profiler_step": include_last, "rows": json.loads(df.to_json(orient="records"))}
        )
    print(
        json.dumps(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')}",
                "call": "TraceAnalysis(trace_dir, include_last_profiler_step).get_comm_comp_overlap(visualize=False)",
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_overlap_reference.py "
                    "--shared ../shared > tests/data/hta/comm_comp_overlap.json"
                ),
                "ns_rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1",
                "date": datetime.date.today().isoformat(),
                "entries": entries,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
