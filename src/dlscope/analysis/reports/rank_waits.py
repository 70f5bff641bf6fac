"""Which rank the others wait for, judged from the steps measured without the tracer.

In lock step (ranks joined by collectives) every rank's step lasts about as long; a slow rank
shows in how long the *others* wait. dlscope's hooks time the host's waits for the GPU in every
step (``sync``: ``.item()``, ``.cpu()``, ``torch.cuda.synchronize``; see
:mod:`dlscope.capture.torch_hooks`), and a rank whose GPU stream is stalled in a collective until
the last rank arrives waits there. Per step, a rank's lag is the median wait of the other ranks
minus its own: what the others would stop waiting if it kept pace.

The traced steps cannot judge this: the tracer's host overhead differs per rank (and per run), so
a balanced job's traced steps show a different "straggler" every run. Over the untraced steps a
straggler is a rank whose lag is positive in significantly more steps than chance (a one-sided
sign test, Bonferroni-corrected for the number of ranks) and stands out of its own step-to-step
jitter (the median lag over :data:`OUTLIER_MADS` robust standard deviations of the lag: on
balanced 2- and 4-GPU jobs one rank was often steadily 2-8 ms later, at most 1.8 of its lag's
deviations; the real stragglers stood 3.3-18 out, ``bench/RESULTS.md``).
The saving is what the other ranks really wait in a typical step (:attr:`StragglerVerdict.saving_ms`).

Two measures of a rank's waiting; the second wherever every rank has GPU phase marks:

* ``host waits``: the hook ``sync`` phases (the host blocked in ``.item()`` and the like). A host
  wait is also a wait for the rank's own queued GPU work, so on a GPU-bound job a rank whose host
  merely runs slower waits less there and looks like a straggler: used only without marks;
* ``GPU waits``: from the CUDA events at the phase boundaries (``phase_gpu``, every step), the time
  each phase took on the GPU beyond both what its host took to launch it and the phase's GPU time
  on the quickest rank of that step (``max(0, GPU span - max(host span, quickest rank's GPU
  span))``), summed per step with the stalls queued between phases. A rank's stream stalled in a
  collective until the last rank arrives stretches the phase on the GPU (a DDP backward ends after
  its all-reduce); a rank whose *host* is slow in a phase does not, its GPU merely keeps pace; and
  the quickest rank's span is the phase's own GPU work where every rank has the same (a balanced
  job), so a busy GPU's queue is not counted as waiting. It needs no ``.item()`` in the step. On
  2-GPU DDP and 2- and 4-GPU FSDP2 jobs with a 25 ms Python straggler, the others' lag measured
  24.7-25.7 ms; balanced jobs 0.0-0.4 ms (H100, ``bench/advice_truth/results/``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.class_times import step_class_times
from ..core.context import ProfileData
from ..core.host_classes import HostClass
from ..core.report import Report, ReportResult, fixed, integer

# A pattern, not chance: the sign test's one-sided p-value under this (after the Bonferroni
# correction for the ranks compared) -- the usual 1% level.
ALPHA = 0.01
MIN_STEPS = 5
# A lag counts when it stands out of the waits' jitter by this many robust standard deviations
# (1.4826 x the median absolute deviation): the "moderately conservative" outlier line of Leys et
# al., "Detecting outliers: Do not use standard deviation around the mean, use absolute deviation
# around the median", J. Exp. Soc. Psychol. 49 (2013).
OUTLIER_MADS = 2.5
MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class StragglerVerdict:
    """The rank with the largest mean lag over the untraced steps, and whether it is a straggler."""

    rank: int
    ranks: int
    steps: int  # steps every rank measured untraced
    lag_ms: float  # median over the steps of (the other ranks' median wait - its wait)
    others_wait_ms: float  # the other ranks' median wait per step, averaged
    step_ms: float  # mean step, over every rank
    lagging_steps: int  # steps in which its lag was positive
    p_value: float  # one-sided sign test, Bonferroni-corrected
    jitter_ms: float  # its lag's robust standard deviation over the steps
    excess_ms: dict[HostClass, float]  # its host time per class minus the others' median, per step
    basis: str = "host waits"  # or 'GPU waits' (see the module's doc)

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA and self.lag_ms > max(OUTLIER_MADS * self.jitter_ms, 0.0)

    @property
    def saving_ms(self) -> float:
        """What the other ranks really wait per step for it. From the GPU's waits: the others' wait,
        not its lag, because the straggler's own 'wait' there holds GPU work queued behind its own
        late host (a slow hook inside the forward: its GPU finishes the forward after its host, 9.9
        ms a step), which the lag would subtract: 11.3 ms of lag against a measured cost of 20.7-22.1
        ms, the others' wait 22.3 ms (2 H100s, bench/gpu_dist_run5.sh). From the host's waits: the
        lag, since the straggler's own host also waits at the step's end for its GPU."""
        return self.others_wait_ms if self.basis == "GPU waits" else self.lag_ms

    @property
    def slower_everywhere(self) -> bool:
        """Its host took longer than the others' in each class of the step's own work (input, model,
        optimizer): a slower host (placement, contention) rather than more work in one place."""
        return all(self.excess_ms.get(c, 0.0) > 0 for c in (HostClass.INPUT, HostClass.MODEL, HostClass.OPTIMIZER))

    @property
    def culprit(self) -> HostClass | None:
        best = max(self.excess_ms.items(), key=lambda kv: kv[1], default=None)
        return best[0] if best and best[1] > 0 else None


def sign_test_p(positive: int, nonzero: int) -> float:
    """P(X >= positive) for X ~ Binomial(nonzero, 1/2): the one-sided sign test."""
    if nonzero <= 0:
        return 1.0
    return sum(math.comb(nonzero, k) for k in range(positive, nonzero + 1)) / 2.0**nonzero


def untraced_straggler(data: ProfileData, prefer: str | None = None) -> StragglerVerdict | None:
    """The verdict over the untraced steps; None with fewer than two ranks, fewer than
    :data:`MIN_STEPS` untraced steps shared by every rank, or no wait measured on every rank
    (host waits in most steps, or GPU phase marks). ``prefer='GPU waits'`` judges from the GPU
    marks even where the host waits too."""
    got = wait_grid(data, prefer)
    if got is None:
        return None
    basis, ranks, grid = got
    lag, others_wait = lags(grid["wait_ns"])
    n_ranks, n_steps = lag.shape
    r = int(np.argmax(np.median(lag, axis=1)))
    positive, nonzero = int((lag[r] > 0).sum()), int((lag[r] != 0).sum())
    p = min(1.0, sign_test_p(positive, nonzero) * n_ranks)
    excess = {}
    for c in HostClass:
        own = grid[f"{c.label}_ns"]
        excess[c] = float(np.median(own[r] - np.median(np.delete(own, r, axis=0), axis=0))) / 1e6
    return StragglerVerdict(
        rank=int(ranks[r]),
        ranks=n_ranks,
        steps=n_steps,
        lag_ms=float(np.median(lag[r])) / 1e6,
        others_wait_ms=float(np.median(others_wait[r])) / 1e6,
        step_ms=float(grid["step_ns"].mean()) / 1e6,
        lagging_steps=positive,
        p_value=p,
        jitter_ms=lag_jitter(lag[r]) / 1e6,
        excess_ms=excess,
        basis=basis,
    )


def lag_jitter(lag: np.ndarray) -> float:
    """A lag's own step-to-step spread (robust standard deviation): a balanced job's ranks take
    turns being last (or one is steadily a little later, within that spread); a straggler's lag
    stands clear of it."""
    return MAD_TO_SD * float(np.median(np.abs(lag - np.median(lag))))


def lags(wait: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per rank and step (rows, columns of ``wait``): the other ranks' median wait minus its own,
    and the other ranks' median wait."""
    lag = np.empty_like(wait)
    others_wait = np.empty_like(wait)
    for r in range(wait.shape[0]):
        others_wait[r] = np.median(np.delete(wait, r, axis=0), axis=0)
        lag[r] = others_wait[r] - wait[r]
    return lag, others_wait


def wait_grid(data: ProfileData, prefer: str | None = None) -> tuple[str, np.ndarray, dict[str, np.ndarray]] | None:
    """(basis, ranks, per-name rank x step arrays of the untraced steps every rank measured:
    ``step_ns``, ``wait_ns``, ``sync_ns``, ``gpu_wait_ns`` and each host class's ``*_ns``), or
    None (see :func:`untraced_straggler`)."""
    if not data.traced_excluded:
        return None
    t = step_class_times(data, "stat_steps", waits_apart=True)
    ranks = np.unique(t["rank"])
    if len(ranks) < 2:
        return None
    gpu = gpu_waits(data, t["rank"], t["step"])
    t["gpu_wait_ns"] = gpu if gpu is not None else np.full(len(t["rank"]), np.nan)
    # the GPU's own stalls where every rank has marks: a host wait is also a wait for the rank's own
    # queued GPU work, so a rank whose host merely runs slower ahead of a busy GPU waits less there
    # and looks like a straggler to the others (a balanced FSDP2 job: 7.1 ms "lag", 4 deviations,
    # while every rank's GPU spans matched within 0.1 ms; bench/RESULTS.md)
    if gpu is not None and prefer != "host waits":
        basis, t["wait_ns"] = "GPU waits", gpu
    elif _every_rank_waits(t, ranks):
        basis, t["wait_ns"] = "host waits", t["sync_ns"]
    else:
        return None
    steps = np.unique(t["step"])
    grid = {
        name: np.full((len(ranks), len(steps)), np.nan)
        for name in ("step_ns", "wait_ns", "sync_ns", "gpu_wait_ns", *(f"{c.label}_ns" for c in HostClass))
    }
    ri = np.searchsorted(ranks, t["rank"])
    si = np.searchsorted(steps, t["step"])
    for name, g in grid.items():
        g[ri, si] = t[name]
    whole = ~(np.isnan(grid["step_ns"]) | np.isnan(grid["wait_ns"])).any(axis=0)  # steps every rank measured
    if whole.sum() < MIN_STEPS:
        return None
    return basis, ranks, {k: v[:, whole] for k, v in grid.items()}


def _every_rank_waits(t: dict[str, np.ndarray], ranks: np.ndarray) -> bool:
    """Whether each rank's host waited in at least half its steps (a program that calls
    ``.item()`` every step); otherwise the host waits say nothing about the other ranks."""
    for r in ranks:
        w = t["sync_ns"][t["rank"] == r]
        if not len(w) or (w > 0).mean() < 0.5:
            return False
    return True


def gpu_waits(data: ProfileData, rank: np.ndarray, step: np.ndarray) -> np.ndarray | None:
    """Per (rank, step) pair given: the GPU's stalls, from the phase markers (``phase_gpu``), in ns;
    None when some rank has no marks (a profile recorded without them, or a rank without CUDA).

    Two parts, summed over the step:

    * per phase (its occurrences in the step summed), how much longer the GPU took for it than both
      the host took to launch it and the quickest rank's GPU took for the same phase of the same
      step (``max(0, GPU span - max(host span, quickest GPU span))``): a stall such as DDP's
      backward waiting for its all-reduce. A GPU that is simply busy (its host ahead of it) spans
      the phase's own work, as the quickest rank's does;
    * between a phase's end and the next one's start, where a step queues little work (the loss,
      ``zero_grad``, the batch's copy, FSDP's all-gather for the next forward): how long after both
      the host recorded the next start and the GPU passed the previous end the GPU still needed
      (``max(0, g_next - max(g_prev, h_next))``): a stall queued there, such as FSDP2 waiting for
      the next all-gather before the forward's first module runs.

    A rank slow on its host shows no more than the others (its GPU keeps pace); a rank stalled on a
    late one shows the stall; the GPU work is the same on every rank of a balanced job. A rank
    whose GPU has more work than the others (or runs slower) is not found this way: the others'
    spans stretch by exactly its extra work, so no span stands out."""
    if not data.has("phase_gpu"):
        return None
    got = data.con.execute("""
        WITH p AS (SELECT rank, step, name, start_ns, end_ns, gpu_start_ns, gpu_end_ns,
                          lag(gpu_end_ns) OVER w AS prev_gpu_end
                   FROM phase_gpu WINDOW w AS (PARTITION BY rank, tid, device ORDER BY start_ns)),
             per AS (SELECT rank, step, name, sum(gpu_end_ns - gpu_start_ns) AS gpu, sum(end_ns - start_ns) AS host,
                            sum(CASE WHEN prev_gpu_end IS NULL THEN 0  -- (greatest() skips NULLs)
                                ELSE greatest(0, gpu_start_ns - greatest(prev_gpu_end, start_ns)) END) AS between
                     FROM p WHERE step IS NOT NULL GROUP BY ALL),
             floor AS (SELECT step, name, min(gpu) AS work FROM per GROUP BY ALL)
        SELECT rank, step, sum(greatest(0, gpu - greatest(host, work)) + between)
        FROM per JOIN floor USING (step, name) GROUP BY rank, step""").fetchall()
    if not got:
        return None
    by = {(int(r), int(s)): float(v) for r, s, v in got}
    if set(np.unique(rank).tolist()) - {r for r, _ in by}:
        return None
    return np.array([by.get((int(r), int(s)), np.nan) for r, s in zip(rank, step)])


# ---- the report ------------------------------------------------------------------------------
def compute(data: ProfileData) -> ReportResult:
    import pyarrow as pa

    got = wait_grid(data)
    if got is None:
        return ReportResult(
            "rank_waits",
            REPORT.title,
            pa.table({"rank": pa.array([], pa.int32())}),
            FORMATS,
            [
                "no verdict: fewer than two ranks, too few steps measured without tracing, or no wait "
                "measured on every rank (host waits in most steps, or GPU phase marks)"
            ],
        )
    basis, ranks, grid = got
    lag, _ = lags(grid["wait_ns"])

    def med(a: np.ndarray) -> float | None:
        return None if np.isnan(a).all() else float(np.nanmedian(a)) / 1e6

    rows = [
        {
            "rank": int(ranks[i]),
            "steps": int(grid["step_ns"].shape[1]),
            "step_ms": med(grid["step_ns"][i]),
            "host_wait_ms": med(grid["sync_ns"][i]),
            "gpu_wait_ms": med(grid["gpu_wait_ns"][i]),
            "lag_ms": float(np.median(lag[i])) / 1e6,
            "lag_jitter_ms": lag_jitter(lag[i]) / 1e6,
            "lagging_steps": int((lag[i] > 0).sum()),
        }
        for i in range(len(ranks))
    ]
    v = untraced_straggler(data)
    notes = [
        "from the steps measured without tracing, on every rank; lag: the other ranks' median wait minus this "
        f"rank's ({basis}), median over the steps; a straggler lags consistently (sign test) and by over "
        f"{OUTLIER_MADS:g} of its lag's robust standard deviations (lag_jitter_ms)"
    ]
    if v is not None:
        notes.append(
            f"verdict: rank {v.rank} {'is' if v.significant else 'is not'} a straggler (lag {v.lag_ms:.3f} ms, "
            f"p = {v.p_value:.2g}, {v.lag_ms / v.jitter_ms if v.jitter_ms else float('inf'):.1f} deviations)"
        )
    return ReportResult("rank_waits", REPORT.title, pa.Table.from_pylist(rows), FORMATS, notes)


FORMATS = {
    "rank": integer(),
    "steps": integer(),
    "step_ms": fixed(3),
    "host_wait_ms": fixed(3),
    "gpu_wait_ms": fixed(3),
    "lag_ms": fixed(3),
    "lag_jitter_ms": fixed(3),
    "lagging_steps": integer(),
}


def _why_not(data: ProfileData) -> str | None:
    if int(data.scalar("SELECT count(DISTINCT rank) FROM steps") or 0) < 2:
        return "fewer than two ranks with steps: nothing to compare"
    return None


REPORT = Report(
    "rank_waits",
    "Waits per rank, measured without the tracer: who keeps the others waiting",
    compute,
    needs=("steps", "phases"),
    precondition=_why_not,
    doc=(
        "per rank over the untraced steps: the host's and the GPU's waits, and how much longer the "
        "others waited than this rank (the straggler verdict's evidence)"
    ),
)
