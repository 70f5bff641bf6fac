"""memory_by_rank: each rank's GPU memory at its peak, and, for FSDP, what is sharded and gathered.

Per rank, over the selected steps (all samples in a profile without steps):

* ``peak_used_gb``: NVML's ``mem_used`` on the rank's GPU at its peak (the whole device: every
  process on it), against the device's memory (``device_gb``, ``peak_pct``);
* ``reserved_peak_gb`` / ``allocated_peak_gb``: what PyTorch's caching allocator reserved and
  handed out at the peak, where the trace has memory events (``--mode full``);
* FSDP (from the all-gathers' message sizes in the traced steps): ``sharded_params_gb``, the
  rank's share of the parameters (the forward's all-gather inputs in one step: every unit is
  gathered once in forward), and ``largest_gathered_gb``, the largest unit unsharded (an
  all-gather's output): what one gather adds to the peak, twice that with the next unit
  prefetched.
"""

from __future__ import annotations

from ..core.context import ProfileData
from ..core.intervals import points_in_sql
from ..core.report import Report, ReportResult, fixed, integer

GB = 1e9


def compute(data: ProfileData) -> ReportResult:
    peaks = _peaks(data)
    fsdp = _fsdp(data)
    # each sampled GPU's memory as NVML counts it (mem_used's own total), by NVML index; the
    # framework's descriptions (CUDA's total, a little less) only where NVML gave none
    totals: dict[int, float] = {}
    for d in sorted(data.meta.devices, key=lambda d: d.get("source") != "nvml"):
        i = d.get("nvml_index", d.get("index"))
        if d.get("memory_bytes") and i is not None:
            totals.setdefault(int(i), float(d["memory_bytes"]))
    ranks = sorted(set(peaks) | set(fsdp))
    rows = []
    for r in ranks:
        p = peaks.get(r, {})
        dev = p.get("device")
        used, total = p.get("mem_used"), totals.get(int(dev)) if dev is not None else None
        rows.append(
            {
                "rank": r,
                "device": p.get("device"),
                "peak_used_gb": used / GB if used else None,
                "device_gb": total / GB if total else None,
                "peak_pct": 100 * used / total if used and total else None,
                "reserved_peak_gb": p["torch_reserved"] / GB if p.get("torch_reserved") else None,
                "allocated_peak_gb": p["torch_allocated"] / GB if p.get("torch_allocated") else None,
                "sharded_params_gb": fsdp[r][0] / GB if r in fsdp else None,
                "largest_gathered_gb": fsdp[r][1] / GB if r in fsdp else None,
            }
        )
    import pyarrow as pa

    table = pa.Table.from_pylist(rows) if rows else pa.table({"rank": pa.array([], pa.int32())})
    notes = [
        "peak_used_gb: NVML mem_used on the rank's GPU (every process on it); reserved/allocated: PyTorch's "
        "caching allocator, from a trace's memory events (--mode full)"
    ]
    if fsdp:
        notes.append(
            "sharded_params_gb: the forward all-gathers' inputs in one traced step (the rank's share of the "
            "parameters); largest_gathered_gb: the largest all-gather output (one unit unsharded)"
        )
    return ReportResult("memory_by_rank", REPORT.title, table, FORMATS, notes)


def _peaks(data: ProfileData) -> dict[int, dict[str, float]]:
    """rank -> metric -> peak value over the selected steps (and 'device': the GPU sampled)."""
    if not data.has("counters"):
        return {}
    samples = (
        "SELECT rank, device, ts_ns, metric, value FROM counters "
        "WHERE metric IN ('mem_used', 'torch_reserved', 'torch_allocated')"
    )
    if int(data.scalar("SELECT count(*) FROM sel_steps") or 0):
        samples = points_in_sql(samples, "SELECT * FROM sel_steps", "p.rank, p.device, p.metric, p.value")
    out: dict[int, dict[str, float]] = {}
    for rank, device, metric, peak in data.con.execute(
        f"SELECT rank, any_value(device), metric, max(value) FROM ({samples}) GROUP BY rank, metric"
    ).fetchall():
        d = out.setdefault(int(rank), {})
        d[metric] = float(peak)
        if metric == "mem_used":
            d["device"] = device
    return out


def _fsdp(data: ProfileData) -> dict[int, tuple[float, float]]:
    """rank -> (sharded parameter bytes, largest gathered unit bytes), from one traced step's
    all-gathers: the forward's (launched outside the backward hook phase) inputs summed."""
    if not (data.has("comms") and data.has("api") and data.has("phases")) or not data.scalar(
        "SELECT count(*) FROM (SELECT 1 FROM phases WHERE name LIKE 'FSDP::all_gather%' LIMIT 1)"
    ):
        return {}  # not an FSDP job (DDP also all-gathers a few bytes at start-up)
    got = data.con.execute("""
        WITH ag AS (SELECT c.rank, c.step, c.in_bytes, c.out_bytes, a.start_ns AS launch_ns
                    FROM comms c JOIN api a ON a.rank = c.rank AND a.correlation_id = c.correlation_id
                    WHERE c.name = 'allgather' AND c.step IS NOT NULL AND c.in_bytes IS NOT NULL),
             fwd AS (SELECT ag.* FROM ag WHERE NOT EXISTS (
                        SELECT 1 FROM phases p WHERE p.rank = ag.rank AND p.source = 'hook' AND p.name = 'backward'
                          AND p.start_ns <= ag.launch_ns AND ag.launch_ns < p.end_ns)),
             per_step AS (SELECT rank, step, sum(in_bytes) AS sharded FROM fwd GROUP BY rank, step)
        SELECT p.rank, median(p.sharded), (SELECT max(out_bytes) FROM ag WHERE ag.rank = p.rank)
        FROM per_step p GROUP BY p.rank""").fetchall()
    return {int(r): (float(s), float(g or 0)) for r, s, g in got}


FORMATS = {
    "rank": integer(),
    "device": integer(),
    "peak_used_gb": fixed(2),
    "device_gb": fixed(1),
    "peak_pct": fixed(1),
    "reserved_peak_gb": fixed(2),
    "allocated_peak_gb": fixed(2),
    "sharded_params_gb": fixed(3),
    "largest_gathered_gb": fixed(3),
}

REPORT = Report(
    "memory_by_rank",
    "GPU memory per rank: the peak, and what FSDP shards and gathers",
    compute,
    needs=("counters",),
    doc=(
        "per rank: peak GPU memory (NVML; PyTorch's allocator with --mode full), the device's total, "
        "and for FSDP the sharded parameters and the largest gathered unit"
    ),
)
