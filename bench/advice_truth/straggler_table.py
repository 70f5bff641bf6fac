"""The straggler verdicts of every multi-rank profile under a folder, from the host waits (the
verdict before the GPU marks were preferred) and from the GPU waits (now), with the rule's finding:
the table in bench/RESULTS.md ("stragglers from the GPU's own stalls").

    python bench/advice_truth/straggler_table.py FOLDER  (the leases' profile tarballs, unpacked)
"""

from __future__ import annotations

import sys
from pathlib import Path

from dlscope.advice import straggler
from dlscope.advice.context import Context
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports import rank_waits as rw


def cell(v: rw.StragglerVerdict | None, others: bool) -> str:
    if v is None:
        return "-"
    dev = v.lag_ms / v.jitter_ms if v.jitter_ms else float("inf")
    return (
        f"r{v.rank}, {v.lag_ms:.2f}"
        + (f", {v.others_wait_ms:.2f}" if others else "")
        + f", {dev:.1f}, {'STRAGGLER' if v.significant else 'no'}"
    )


def main(folder: Path) -> int:
    print(
        "| profile | host waits: rank, lag ms, deviations, verdict "
        "| GPU waits: rank, lag ms, others' wait ms, deviations, verdict | finding |"
    )
    print("|---|---|---|---|")
    for p in sorted(folder.rglob("*.dlscope")):
        d = ProfileData.open(p)
        if int(d.scalar("SELECT count(DISTINCT rank) FROM steps") or 0) < 2:
            continue
        host, gpu = rw.untraced_straggler(d, "host waits"), rw.untraced_straggler(d)
        f = straggler.RULE.check(Context(d))
        print(
            f"| {p.relative_to(folder)} | {cell(host, False)} | "
            f"{cell(gpu if gpu is not None and gpu.basis == 'GPU waits' else None, True)} | "
            f"{'-' if f is None else f'{f.severity} {f.saving_ms_per_step:.1f} ms'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
