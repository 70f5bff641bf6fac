"""Write temporal_breakdown.json: HTA's get_temporal_breakdown on the fixtures and HTA's corpus.

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_reference.py \
        --shared ../shared > tests/data/hta/temporal_breakdown.json

``HTA_DISABLE_NS_ROUNDING=1`` keeps HTA at the traces' own resolution. By default HTA rounds the
start of every event up and its end down to whole microseconds, which shrinks each of the
thousands of few-microsecond kernels by up to 2 us and moves the idle share by up to 1.5 points
on the H100 fixtures (gpt6_bf16: 71.51% idle rounded, 69.98% at full resolution).

Each entry: the trace (a path relative to the repository, or to ``shared``), whether HTA kept
the kernels of the last ProfilerStep (``include_last_profiler_step``), and HTA's rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import tempfile
from pathlib import Path

# (location, path, include_last_profiler_step)
TRACES = [
    ("repo", "tests/data/kineto/h100_resnet50_phases.trace.json.gz", False),
    ("repo", "tests/data/kineto/h100_resnet50_phases.trace.json.gz", True),
    ("repo", "tests/data/kineto/h100_gpt6_fp32.trace.json.gz", False),
    ("repo", "tests/data/kineto/h100_gpt6_bf16.trace.json.gz", False),
    ("shared", "fixtures/gpu/h100_gpt12_bf16_40steps.trace.json.gz", False),
    ("shared", "corpus/hta/amd_trace", False),
    ("shared", "corpus/hta/call_stack", False),
    ("shared", "corpus/hta/critical_path/alexnet", False),
    ("shared", "corpus/hta/critical_path/cuda_event_sync", False),
    ("shared", "corpus/hta/critical_path/cuda_event_sync_multi_stream", False),
    ("shared", "corpus/hta/critical_path/simple_add", False),
    ("shared", "corpus/hta/df_index_resolver", False),
    ("shared", "corpus/hta/df_index_resolver", True),
    ("shared", "corpus/hta/mtia_inference_trace", False),
    ("shared", "corpus/hta/mtia_trace_single_rank", False),
    ("shared", "corpus/hta/nccl_parser_config", False),
    ("shared", "corpus/hta/nccl_parser_config", True),
    ("shared", "corpus/hta/negative_queue_length_values_check", False),
    ("shared", "corpus/hta/ns_resolution_trace", False),
    ("shared", "corpus/hta/ns_resolution_trace", True),
    ("shared", "corpus/hta/timeline_analysis", False),
    ("shared", "corpus/hta/trace_compare/base", True),
    ("shared", "corpus/hta/trace_diff/control", False),
    ("shared", "corpus/hta/trace_diff/test", True),
    ("shared", "corpus/hta/trace_file_list", False),
    ("shared", "corpus/hta/trace_filter", False),
    ("shared", "corpus/hta/trace_filter", True),
    ("shared", "corpus/hta/triton_example", False),
]


def compact(doc: dict) -> str:
    """The document with one line per row of its entries (the file stays small and diffs well)."""

    def entry(e: dict) -> str:
        head = {k: v for k, v in e.items() if not isinstance(v, list) or k == "ranks"}
        lists = "".join(
            f',\n  "{k}": [\n   ' + ",\n   ".join(json.dumps(r) for r in v) + "]"
            for k, v in e.items()
            if isinstance(v, list) and k != "ranks"
        )
        return json.dumps(head)[:-1] + lists + "}"

    head = json.dumps({k: v for k, v in doc.items() if k != "entries"}, indent=1)[:-2]
    return head + ',\n "entries": [\n ' + ",\n ".join(entry(e) for e in doc["entries"]) + "\n ]\n}"


def trace_analyses(shared: str):  # noqa: ANN201 - an iterator of HTA objects (HTA is not a dependency)
    """(location, path, include_last_profiler_step, HTA's TraceAnalysis) for each trace of
    :data:`TRACES`, read from the repository or from ``shared``; a single trace file is put in a
    folder of its own (HTA reads folders). Shared by every reference maker here."""
    from hta.trace_analysis import TraceAnalysis

    for where, rel, include_last in TRACES:
        path = (Path(shared) if where == "shared" else Path.cwd()) / rel
        trace_dir = path
        if path.is_file():
            trace_dir = Path(tempfile.mkdtemp())
            (trace_dir / path.name).symlink_to(path.resolve())
        yield where, rel, include_last, TraceAnalysis(trace_dir=str(trace_dir), include_last_profiler_step=include_last)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, help="the project's shared/ directory")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from importlib.metadata import version

    import hta  # noqa: F401

    entries = []
    for where, rel, include_last, ta in trace_analyses(args.shared):
        df = ta.get_temporal_breakdown(visualize=False)
        entries.append(
            {
                "location": where,
                "path": rel,
                "include_last_profiler_step": include_last,
                "rows": json.loads(df.to_json(orient="records")),
            }
        )
    print(
        json.dumps(
            {
                "tool": f"HolisticTraceAnalysis {version('HolisticTraceAnalysis')}",
                "call": "TraceAnalysis(trace_dir, include_last_profiler_step).get_temporal_breakdown(visualize=False)",
                "command": (
                    "HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_reference.py "
                    "--shared ../shared > tests/data/hta/temporal_breakdown.json"
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
