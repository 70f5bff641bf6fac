"""Write trace_diff.json: HTA's TraceDiff.compare_traces on HTA's two trace pairs, the reference
for the op and kernel tables of `dlscope diff` (tests/test_diff_hta.py).

Run it with HTA installed (not a dlscope dependency; CI only reads the JSON), from the repository
root:

    HTA_DISABLE_NS_ROUNDING=1 /tmp/htavenv/bin/python tests/data/hta/make_trace_diff_reference.py \
        --shared ../shared > tests/data/hta/trace_diff.json

Every iteration of both traces is compared (HTA's default is the first only), GPU kernels and CPU
events separately. Copies and sets are left out (HTA names them by memory kind, dlscope by
direction). Durations in microseconds, as HTA reports them.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

PAIRS = {"trace_diff": ("control", "test"), "trace_compare": ("base", "test")}
FIELDS = ("control_counts", "test_counts", "control_total_duration", "test_total_duration")


def main() -> None:
    from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff

    logging.disable(logging.WARNING)
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True, type=Path)
    args = ap.parse_args()
    out = {}
    for pair, (a, b) in PAIRS.items():
        root = args.shared / "corpus" / "hta" / pair
        # HTA names its columns after the labels: 'control' and 'test' for every pair
        ta = LabeledTrace(label="control", trace_dir=str(root / a))
        tb = LabeledTrace(label="test", trace_dir=str(root / b))
        out[pair] = {"control": a, "test": b, "iterations": {"control": ta.iterations(), "test": tb.iterations()}}
        for kind in ("GPU", "CPU"):
            df = TraceDiff.compare_traces(
                ta, tb, control_iteration=ta.iterations(), test_iteration=tb.iterations(), device_type=DeviceType[kind]
            ).reset_index()
            rows = [
                {"name": r["name"], **{f: float(r[f]) for f in FIELDS}}
                for r in df.to_dict(orient="records")
                if not (kind == "GPU" and str(r["name"]).startswith(("Memcpy", "Memset")))
            ]
            out[pair][kind.lower()] = sorted(rows, key=lambda r: r["name"])
    print(json.dumps(out, indent=0))


if __name__ == "__main__":
    main()
