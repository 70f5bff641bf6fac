"""Issue 40's acceptance on an unannotated JAX loop: the median of the steps dlscope derived (the runs
of the repeated jit executable) against the median of the program's own timer, over the same steps.

    python bench/jax_steps_check.py PROFILE TIMES.json [--bare BARE.json] [--skip 5] [-o check.json]

TIMES.json is ``{"steps_ms": [...]}`` written by the profiled program itself
(bench/programs/jax_unannotated.py --times-out): its entry i is the i-th call of the jitted step,
and so is the profile's step i (every call is traced when no step is annotated). The first --skip
steps are left out of both (the first call compiles). --bare adds the same program's untraced run,
to show what tracing cost the program's own steps. Prints and writes one JSON object; exit code 0
whether or not the check holds (the JSON says), 2 when there is nothing to compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from dlscope.analysis.core.context import ProfileData

TOLERANCE = 0.05  # the acceptance's "within 5%"


def profile_steps_ms(path: Path) -> tuple[dict[int, float], list[str]]:
    """Step index -> duration (ms) of the lowest rank's steps, and the steps' sources."""
    con = ProfileData.open(path).con
    rows = con.execute(
        "SELECT step, (end_ns - start_ns) / 1e6 FROM steps WHERE rank = (SELECT min(rank) FROM steps) ORDER BY step"
    ).fetchall()
    sources = [s for (s,) in con.execute("SELECT DISTINCT source FROM steps ORDER BY 1").fetchall()]
    return {int(step): float(ms) for step, ms in rows}, sources


def own_steps_ms(path: Path) -> list[float]:
    return [float(x) for x in json.loads(path.read_text())["steps_ms"]]


def compare(profile: dict[int, float], own: list[float], skip: int, bare: list[float] | None = None) -> dict:
    """Medians over the step indices both hold, from ``skip`` on."""
    idx = [i for i in sorted(profile) if skip <= i < len(own)]
    if not idx:
        return {"error": f"no step index from {skip} on in both (profile {len(profile)}, program {len(own)})"}
    prof_med = statistics.median(profile[i] for i in idx)
    own_med = statistics.median(own[i] for i in idx)
    ratio = prof_med / own_med
    out = {
        "steps_profile": len(profile),
        "steps_program": len(own),
        "compared": f"{idx[0]}-{idx[-1]} ({len(idx)} steps)",
        "profile_median_ms": round(prof_med, 3),
        "program_median_ms": round(own_med, 3),
        "ratio": round(ratio, 4),
        # one step against the same one: how far each derived step is from the program's, at the median
        "median_abs_step_diff_ms": round(statistics.median(abs(profile[i] - own[i]) for i in idx), 3),
        "within_5pct": "yes" if abs(ratio - 1) <= TOLERANCE else "no",
    }
    if bare:
        bare_med = statistics.median(bare[skip:] or bare)
        out["bare_median_ms"] = round(bare_med, 3)
        out["profiled_over_bare"] = round(own_med / bare_med, 4)  # what tracing every step cost
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("times", type=Path, help="the profiled program's own step times (--times-out)")
    ap.add_argument("--bare", type=Path, help="the same program's times, run without dlscope")
    ap.add_argument("--skip", type=int, default=5, help="leave out the first N steps (compiling) [5]")
    ap.add_argument("-o", "--output", type=Path)
    a = ap.parse_args()
    profile, sources = profile_steps_ms(a.profile)
    res = {"profile": str(a.profile), "sources": sources, "skip": a.skip}
    res.update(compare(profile, own_steps_ms(a.times), a.skip, own_steps_ms(a.bare) if a.bare else None))
    text = json.dumps(res, indent=1)
    print(text)
    if a.output:
        a.output.write_text(text + "\n")
    return 2 if "error" in res else 0


if __name__ == "__main__":
    sys.exit(main())
