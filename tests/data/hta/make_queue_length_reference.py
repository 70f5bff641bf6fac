"""Write queue_length.json: HTA's get_queue_length_summary and get_time_spent_blocked_on_full_queue
on the fixtures and HTA's corpus.

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv4/bin/python tests/data/hta/make_queue_length_reference.py \
        --shared ../shared > tests/data/hta/queue_length.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution (see make_reference.py).
The traces and step choices are make_reference.py's (``TRACES``). HTA is asked for every rank of
a trace (by default it looks at rank 0 only).

Each entry: the trace (a path relative to the repository, or to ``shared``), whether HTA kept the
GPU work of the last ProfilerStep, and

* ``summary``: per rank and stream, HTA's ``describe()`` of the queue-length series (count, mean,
  std, min, 25%, 50%, 75%, max of the values the series takes at each change, unweighted);
* ``blocked``: per max queue length in ``MAX_QUEUE_LENGTHS`` (HTA's default, 1024, which no trace
  of the corpus reaches, and small ones that make HTA's sum non-empty), HTA's rows (rank,
  stream, duration_at_max_queue_length in the trace's unit, us, and its share of the rank's trace
  duration);
* ``trace_duration``: per rank, HTA's ``Trace.get_trace_duration(rank)`` (the share's
  denominator: last minus first event start of the rank, after HTA's step filter).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import tempfile
from pathlib import Path

from make_reference import TRACES

MAX_QUEUE_LENGTHS = (1024, 8, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    from hta.trace_analysis import TraceAnalysis

    entries = []
    for where, rel, include_last in TRACES:
        path = (Path(args.shared) if where == "shared" else Path.cwd()) / rel
        trace_dir = path
        if path.is_file():  # HTA reads directories
            trace_dir = Path(tempfile.mkdtemp())
            (trace_dir / path.name).symlink_to(path.resolve())
        ta = TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=include_last)
        ranks = ta.t.get_ranks()
        summary = ta.get_queue_length_summary(ranks)
        rows = []
        if summary is not None:
            summary.columns = [c[1] for c in summary.columns]  # ("queue_length", "mean") -> "mean"
            rows = json.loads(summary.reset_index().to_json(orient="records"))
        blocked = {}
        for m in MAX_QUEUE_LENGTHS:
            # the series is computed again for each call: HTA's sum adds a column to the frames
            df = ta.get_time_spent_blocked_on_full_queue(ta.get_queue_length_time_series(ranks), max_queue_length=m)
            blocked[str(m)] = json.loads(df.to_json(orient="records")) if df is not None else []
        entries.append(
            {
                "location": where,
                "path": rel,
                "include_last_profiler_step": include_last,
                "summary": rows,
                "blocked": blocked,
                "trace_duration": {str(r): float(ta.t.get_trace_duration(r)) for r in ranks},
            }
        )
    print(
        json.dumps(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')}",
                "call": (
                    "TraceAnalysis(trace_dir, include_last_profiler_step).get_queue_length_summary(ranks); "
                    "get_time_spent_blocked_on_full_queue(get_queue_length_time_series(ranks), max_queue_length)"
                ),
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv4/bin/python tests/data/hta/make_queue_length_reference.py "
                    "--shared ../shared > tests/data/hta/queue_length.json"
                ),
                "ns_rounding_disabled": os.environ.get("HTA_DISABLE_NS_ROUNDING") == "1",
                "max_queue_lengths": list(MAX_QUEUE_LENGTHS),
                "date": datetime.date.today().isoformat(),
                "entries": entries,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
