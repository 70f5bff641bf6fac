"""Time the CNN suite program's data decoding alone (``programs.Images``), in this process: the
host work that is 60% of its step. Run several times as separate processes to see whether the
step's spread between runs of the same program comes from the host's own speed.

    python3 bench/cnn_host_probe.py --samples 640
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "advice_truth"))
import programs  # noqa: E402


def last_cpu() -> int:
    """The CPU this process last ran on (/proc/self/stat field 39)."""
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=640)
    a = ap.parse_args()
    data = programs.Images()
    t0 = time.perf_counter()
    for i in range(a.samples):
        data[i]
    ms = (time.perf_counter() - t0) * 1e3 / a.samples
    print(
        json.dumps(
            {
                "ms_per_sample": round(ms, 4),
                "cpu": last_cpu(),
                "affinity": len(os.sched_getaffinity(0)),
                "load": os.getloadavg()[0],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
