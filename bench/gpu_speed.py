"""GPU machine: a long default-mode run with the GPU layers on (issue 16), shortened to fit.

Runs bench/long_run.py for 170 s (an MLP training loop on the GPU with phases, under
`dlscope profile`: the PyTorch layer traces its default window, the NVML sampler runs for the
whole run) and keeps its JSON: RSS of the program and of dlscope every 5 s, the spool's growth,
the profile size extrapolated to one hour, finalize, summary and report times. Everything goes
under $OUT (long_run.json, gpu_speed.log). A full 10-minute run is the same script with
SECONDS_RUN=520 (one command of about 10 minutes).

    OUT=/tmp/out PYTHONPATH=/tmp/site:$PWD/src python3 bench/gpu_speed.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    out = Path(os.environ.get("OUT", "/tmp/dlscope-gpu-speed"))
    out.mkdir(parents=True, exist_ok=True)
    seconds = os.environ.get("SECONDS_RUN", "170")
    log = out / "gpu_speed.log"
    t = time.time()
    try:
        r = subprocess.run(
            [
                sys.executable,
                str(HERE / "long_run.py"),
                "--seconds",
                str(seconds),
                "--every",
                "5",
                "--out",
                str(out / "long_run.json"),
            ],
            capture_output=True,
            text=True,
            timeout=float(seconds) + 65,
        )
        log.write_text(
            f"rc {r.returncode} in {time.time() - t:.1f} s\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr[-20000:]}\n"
        )
    except Exception as e:  # never crash as a whole: say what happened
        log.write_text(f"failed after {time.time() - t:.1f} s: {e.__class__.__name__}: {e}\n")
        if not (out / "long_run.json").exists():
            (out / "long_run.json").write_text(json.dumps({"errors": [f"{e.__class__.__name__}: {e}"]}))
    print(log.read_text()[-3000:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
