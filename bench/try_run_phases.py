"""Each run of a `dlscope try` folder, its host phases: the median time per step of each phase
(`dataloader`, `forward`, `backward`, `optimizer`, ...) over the measured steps, and the median step.

Which of the host's phases a fix shrinks says why it saved what it saved: on the BERT-like program
(issue 38) TF32 and bf16 each saved 26-31% of a step the advice saw as host-bound (the host's phases
summing to the step), which a GPU-only change cannot do unless a phase waits for the GPU.

    python3 bench/try_run_phases.py TRY_DIR [--first-step 6] -o phases.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def run_phases(profile: Path, first_step: int) -> dict[str, object]:
    from dlscope.analysis.core.context import ProfileData

    data = ProfileData.open(profile)
    rows = data.con.execute(
        "SELECT name, median(end_ns - start_ns) / 1e6, count(*) FROM phases WHERE step >= ? AND rank = 0 "
        "GROUP BY name ORDER BY 2 DESC",
        [first_step],
    ).fetchall()
    step = data.con.execute(
        "SELECT median(end_ns - start_ns) / 1e6 FROM steps WHERE step >= ? AND rank = 0", [first_step]
    ).fetchall()[0]
    return {
        "step_ms": round(step[0], 3) if step and step[0] is not None else None,
        "phases_ms": {name: round(ms, 3) for name, ms, _ in rows},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--first-step", type=int, default=6, help="the measured steps start here (try's warm-up)")
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args()
    out: dict[str, object] = {}
    for profile in sorted(a.folder.glob("*.dlscope")):
        try:
            out[profile.name.removesuffix(".dlscope")] = run_phases(profile, a.first_step)
        except Exception as e:  # noqa: BLE001 - a run that left no readable profile is said so, the rest go on
            out[profile.name.removesuffix(".dlscope")] = {"error": f"{type(e).__name__}: {e}"}
    a.output.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
