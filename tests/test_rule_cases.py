"""Every registered rule fires on a real profile that has its problem and stays silent on one that runs it
and does not (issue 37: "each registered rule has a test where it fires and one where it stays silent").

The profiles are the stored real ones of tests/data. Four problems no stored profile has (a memory peak near
the GPU's capacity, a throttled GPU, kernels Nsight Compute found at their peak, a bf16 matrix product whose K
is not a multiple of 8) are made from a real profile
with one fact changed, and the test checks the finding's figures against that fact, computed here from the
Parquet files. A rule added to the registry without both cases fails :func:`test_every_rule_has_both_cases`.

Where a stored profile fires a rule whose figure no other test checks on real data (the distributed rules,
step variance, unused memory), the figure is computed again here from the profile's Parquet files with DuckDB
and plain Python (interval unions, medians), not through dlscope's measures, and compared with the finding.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dlscope import advice
from dlscope.advice.finding import Finding
from dlscope.advice.text import ms
from dlscope.analysis.core.context import ProfileData
from dlscope.application.advise import advise
from dlscope.store.writer import write_table

DATA = Path(__file__).parent / "data"
CNN = "advice_truth/cnn_baseline_default.dlscope"
GPT = "advice_truth/gpt_baseline_default.dlscope"
NCU = "gpu_h100/torch_ncu.dlscope"
DDP = "advice_truth_dist/ddp2_balanced_a.dlscope"
PROBE = "roofline/mm_probe_bf16.dlscope"


def _strings(profile: Path) -> dict[int, str]:
    return {r["id"]: r["value"] for r in pq.read_table(profile / "strings.parquet").to_pylist()}


def _metric_ids(profile: Path, names: set[str]) -> dict[str, int]:
    return {v: k for k, v in _strings(profile).items() if v in names}


def memory_near_limit_variant(src: Path, dst: Path) -> None:
    """The CNN's GPU with just 5% more memory than the program's peak: meta.json's capacity changed."""
    peak = _selected_peak(src, "mem_used")
    meta = json.loads((dst / "meta.json").read_text())
    for d in meta["devices"]:
        d["memory_bytes"] = int(peak / 0.95)
    (dst / "meta.json").write_text(json.dumps(meta))


CAPPED_MHZ = 1500.0


def throttled_variant(src: Path, dst: Path) -> None:
    """The CNN's GPU held at 1500 MHz by its software power cap while the steps were timed without the tracer
    (steps 7-29): in the NVML samples of that period the throttle reasons say 0x4 and the SM clock reads 1500
    MHz, which is what NVML reports of a power-capped GPU; every other sample, and every other table, is the
    real one (the warm-up's samples keep the 1980 MHz the GPU reached)."""
    t = pq.read_table(src / "counters.parquet")
    ids = _metric_ids(src, {"throttle_reasons", "sm_clock"})
    start, end = _timed_period(src)
    during = pc.and_(pc.greater_equal(t["ts_ns"], start), pc.less(t["ts_ns"], end))
    value = t["value"]
    value = pc.if_else(pc.and_(during, pc.equal(t["metric_id"], ids["throttle_reasons"])), pa.scalar(4.0), value)
    value = pc.if_else(pc.and_(during, pc.equal(t["metric_id"], ids["sm_clock"])), pa.scalar(CAPPED_MHZ), value)
    pq.write_table(t.set_column(t.schema.get_field_index("value"), "value", value), dst / "counters.parquet")


def _timed_period(profile: Path) -> tuple[int, int]:
    """From the start of the first step timed without the tracer to the end of the last."""
    steps = [s for s in pq.read_table(profile / "steps.parquet").to_pylist() if not s["warmup"] and not s["traced"]]
    return min(s["start_ns"] for s in steps), max(s["end_ns"] for s in steps)


def at_peak_variant(src: Path, dst: Path) -> None:
    """The kernels Nsight Compute measured, each at 99% of its SM and memory throughput: nothing left to win."""
    t = pq.read_table(src / "kernel_metrics.parquet")
    ids = _metric_ids(src, {"Compute (SM) Throughput", "Memory Throughput"})
    at_peak = pc.is_in(t["metric_id"], pa.array(list(ids.values()), pa.int32()))
    t = t.set_column(t.schema.get_field_index("value"), "value", pc.if_else(at_peak, pa.scalar(99.0), t["value"]))
    pq.write_table(t, dst / "kernel_metrics.parquet")


# the probe's 8192^3 bf16 products (tests/data/roofline/mm_probe.py: a @ b), and the same products recorded with
# K = 1001: issue 42's planted case (bench/programs/odd_linear.py makes it on a GPU)
PROBE_SHAPES = "[[8192,8192],[8192,8192]]"
ODD_K = 1001
ODD_SHAPES = f"[[8192,{ODD_K}],[{ODD_K},8192]]"


def rewrite_strings(src: Path, dst: Path, changes: dict[str, str]) -> None:
    """``dst``'s strings table with the texts ``changes`` names replaced, written by the store's own writer."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE s AS SELECT * FROM read_parquet('{src / 'strings.parquet'}')")
    assert all(con.execute("SELECT count(*) FROM s WHERE value = ?", [old]).fetchone()[0] == 1 for old in changes)
    for old, new in changes.items():
        con.execute("UPDATE s SET value = ? WHERE value = ?", [new, old])
    write_table(con, "s", dst, "strings")


def odd_k_variant(src: Path, dst: Path) -> None:
    """The probe's products recorded as (8192 x 1001) @ (1001 x 8192): K = 1001, not a multiple of 8. Only the
    shapes' text changes (one string, which the aten::matmul and aten::mm of ``a @ b`` share); the kernels and
    their times are the real ones, so the profile says the products did 1001/8192 of the work in the same
    time, as a product the tensor cores cannot run fully does."""
    rewrite_strings(src, dst, {PROBE_SHAPES: ODD_SHAPES})


Variant = tuple[str, Callable[[Path, Path], None]]
Case = str | Variant

# rule -> (a profile where it fires, one where it runs and finds nothing)
CASES: dict[str, tuple[Case, Case]] = {
    "gpu_idle": (CNN, GPT),
    "input_bound": (CNN, "advice_truth/cnn_workers_default.dlscope"),
    "launch_bound": (CNN, GPT),
    "pageable_memcpy": (CNN, GPT),
    "h2d_not_overlapped": (CNN, GPT),
    "sync_in_step": (GPT, CNN),
    "no_tensor_cores": (GPT, CNN),
    "amp_not_enabled": (CNN, "gpu_h100/long_10min_default.dlscope"),
    "layout_transposes": (CNN, GPT),
    "kernel_bound": (NCU, (NCU, at_peak_variant)),  # silent: made, every kernel at 99% of peak
    "fusion_candidates": (GPT, CNN),
    "unfused_optimizer": (CNN, "advice_truth_dist/ddp2_straggler.dlscope"),
    "memory_underused": (CNN, GPT),
    "memory_near_limit": ((CNN, memory_near_limit_variant), CNN),  # fires: made, a GPU 5% larger than the peak
    "high_step_variance": (CNN, GPT),
    "straggler": ("advice_truth_dist/ddp2_straggler.dlscope", DDP),
    "comm_exposed": ("advice_truth_dist/lease4_twolaunch_host0.dlscope", DDP),
    "fsdp_exposed_gathers": ("advice_truth_dist/fsdp4_balanced_a.dlscope", "advice_truth_dist/fsdp4_straggler.dlscope"),
    "small_collectives": ("advice_truth_dist/small_collectives_naive.dlscope", DDP),
    "throttling": ((CNN, throttled_variant), CNN),  # fires: made, power-capped at 1500 MHz
    "below_roofline": ((PROBE, odd_k_variant), PROBE),  # fires: made, the bf16 products' K = 1001
}


def _profile(case: Case, tmp_path: Path) -> Path:
    if isinstance(case, str):
        return DATA / case
    name, edit = case
    dst = tmp_path / Path(name).name
    shutil.copytree(DATA / name, dst, ignore=shutil.ignore_patterns(".cache"))
    edit(DATA / name, dst)
    return dst


_RUNS: dict[Path, advice.AdviceRun] = {}


def _advice(path: Path) -> advice.AdviceRun:
    if path not in _RUNS:  # stored profiles are shared by several rules' cases
        _RUNS[path] = advise(ProfileData.open(path))  # the one advice entry (the results cache is off in tests)
    return _RUNS[path]


def _finding(case: Case, rule_id: str, tmp_path: Path | None = None) -> Finding:
    """``rule_id``'s finding on ``case`` (a made case needs ``tmp_path``, where it is made)."""
    assert tmp_path is not None or isinstance(case, str), "a made case is made in tmp_path"
    path = _profile(case, tmp_path) if tmp_path is not None else DATA / str(case)
    return {f.id: f for f in _advice(path).findings}[rule_id]


def test_every_rule_has_both_cases() -> None:
    """A rule added to advice.RULES fails here until it has a profile where it fires and one where it runs and
    finds nothing; a rule removed from the registry fails here until its cases go too."""
    registered = [r.id for r in advice.RULES]
    assert len(registered) == len(set(registered))
    assert sorted(CASES) == sorted(registered)
    for rule_id, (fires, silent) in CASES.items():
        assert fires and silent and fires != silent, rule_id


@pytest.mark.parametrize("rule_id", list(CASES))
def test_the_rule_fires_on_its_problem(rule_id: str, tmp_path: Path) -> None:
    run = _advice(_profile(CASES[rule_id][0], tmp_path))
    found = {f.id: f for f in run.findings}
    assert rule_id in found, f"{rule_id}: clean={rule_id in run.clean} skipped={run.skipped.get(rule_id)}"
    f = found[rule_id]
    assert f.evidence.text and f.advice
    assert f.saving_pct is None or 0 <= f.saving_pct <= 100


@pytest.mark.parametrize("rule_id", list(CASES))
def test_the_rule_runs_and_stays_silent_without_it(rule_id: str, tmp_path: Path) -> None:
    run = _advice(_profile(CASES[rule_id][1], tmp_path))
    assert rule_id in run.clean, (
        f"{rule_id}: found={rule_id in {f.id for f in run.findings}} skipped={run.skipped.get(rule_id)}"
    )


# ---- the profile's files, read without dlscope ---------------------------------------------------------------


def _db(profile: Path) -> duckdb.DuckDBPyConnection:
    """The profile's Parquet files as DuckDB views, read here without dlscope: each table under its own name,
    with ``name`` (from name_id) and ``metric`` (from metric_id) looked up in strings.parquet."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW strings AS SELECT * FROM read_parquet('{profile / 'strings.parquet'}')")
    for f in sorted(profile.glob("*.parquet")):
        if f.stem == "strings":
            continue
        cols = pq.read_schema(f).names
        extra = "".join(
            f", (SELECT value FROM strings WHERE id = t.{c}_id) AS {c}" for c in ("name", "metric") if f"{c}_id" in cols
        )
        con.execute(f"CREATE VIEW {f.stem} AS SELECT t.*{extra} FROM read_parquet('{f}') t")
    # the steps timed without the tracer (after warm-up), and the traced ones that hold GPU work: the steps that
    # the per-step figures of the traced data (kernels, runtime calls, collectives) are averaged over
    con.execute("CREATE VIEW timed AS SELECT * FROM steps WHERE NOT warmup AND NOT traced")
    con.execute("""CREATE VIEW windows AS SELECT * FROM steps s WHERE traced AND NOT warmup
                   AND EXISTS (SELECT 1 FROM kernels k WHERE k.rank = s.rank AND k.step = s.step)""")
    return con


def _gpu_windows(db: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int, int]]:
    """(rank, step, start_ns, end_ns) of the traced steps with GPU work."""
    return db.execute("SELECT rank, step, start_ns, end_ns FROM windows ORDER BY rank, step").fetchall()


def _timed_steps(db: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int, int]]:
    """(rank, step, start_ns, end_ns) of the steps timed without the tracer."""
    return db.execute("SELECT rank, step, start_ns, end_ns FROM timed ORDER BY rank, step").fetchall()


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of [start, end) intervals."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total, end = total + b - a, b
        elif b > end:
            total, end = total + b - end, b
    return total


def _covered_ns(a: int, b: int, islands: list[tuple[int, int]]) -> int:
    """How much of [a, b) the intervals ``islands`` cover."""
    return _union_ns([(max(x, a), min(y, b)) for x, y in islands if y > a and x < b])


def _selected_peak(profile: Path, metric: str) -> float:
    """The largest sample of ``metric`` inside the steps the analysis selects (warm-up left out), from the files."""
    steps = [s for s in pq.read_table(profile / "steps.parquet").to_pylist() if not s["warmup"]]
    metric_id = _metric_ids(profile, {metric})[metric]
    samples = [c for c in pq.read_table(profile / "counters.parquet").to_pylist() if c["metric_id"] == metric_id]
    inside = [
        c["value"]
        for c in samples
        if any(s["rank"] == c["rank"] and s["start_ns"] <= c["ts_ns"] < s["end_ns"] for s in steps)
    ]
    return max(inside)


# ---- the made cases' figures against the fact that was changed ----------------------------------------------


def test_memory_near_limit_quotes_the_peak_and_the_capacity(tmp_path: Path) -> None:
    f = _finding(CASES["memory_near_limit"][0], "memory_near_limit", tmp_path)
    row = f.evidence.rows[0]
    peak = _selected_peak(DATA / CNN, "mem_used")
    assert row["metric"] == "mem_used"
    assert row["peak_gb"] == pytest.approx(peak / 1e9)
    assert row["total_gb"] == pytest.approx(int(peak / 0.95) / 1e9)
    assert row["peak_pct"] == pytest.approx(95.0, abs=0.01)
    # the cost: the host's cudaMalloc/cudaFree time in the traced steps with GPU work, per step (one cudaMalloc
    # of 0.25 ms in step 1 of the five)
    db = _db(DATA / CNN)
    windows = _gpu_windows(db)
    calls = db.execute("""SELECT count(*), coalesce(sum(a.end_ns - a.start_ns), 0) / 1e6
                          FROM api a SEMI JOIN windows w ON w.rank = a.rank AND w.step = a.step
                          WHERE a.name IN ('cudaMalloc', 'cudaFree', 'cudaMallocAsync', 'cudaFreeAsync')""").fetchone()
    assert calls[0] >= 1
    assert row["alloc_calls_per_step"] == pytest.approx(calls[0] / len(windows))
    assert f.bound_ms_per_step == pytest.approx(calls[1] / len(windows))
    assert f.severity == "low"  # under 5% of the step: a risk more than a cost


def test_throttling_names_the_power_cap_and_the_clock_it_cost(tmp_path: Path) -> None:
    f = _finding(CASES["throttling"][0], "throttling", tmp_path)
    row = f.evidence.rows[0]
    db = _db(DATA / CNN)
    assert row["reasons"] == "software power cap"
    assert row["throttled_pct"] == pytest.approx(100.0)  # every busy sample of the timed steps
    assert row["clock_throttled_mhz"] == pytest.approx(CAPPED_MHZ)
    # the top clock: the highest SM clock sampled, here the real samples outside the capped period
    top = db.execute("SELECT max(value) FROM counters WHERE metric = 'sm_clock'").fetchone()[0]
    assert top == 1980.0 and row["clock_max_mhz"] == pytest.approx(top)
    timed = _timed_steps(db)
    assert row["steps"] == f"steps {timed[0][1]}-{timed[-1][1]}"
    # the GPU's busy time per step: NVML's mean utilization in the timed steps times their mean step time; at
    # 1500 instead of 1980 MHz its work would take (1 - 1500/1980) less
    util = [
        v
        for ts, v in db.execute("SELECT ts_ns, value FROM counters WHERE metric = 'gpu_util'").fetchall()
        if any(a <= ts < b for _, _, a, b in timed)
    ]
    busy_ms = float(np.mean(util)) / 100 * float(np.mean([b - a for _, _, a, b in timed])) / 1e6
    slow = 1 - CAPPED_MHZ / top
    assert (
        f"busy time ({ms(busy_ms)} per step)" in f.evidence.saving and f"{100 * slow:.0f}% slower" in f.evidence.saving
    )
    # the step shrinks by at most what the host waited for the GPU: less than the GPU's saving here, and no more
    # than the traced steps' blocking runtime calls (pageable copies, synchronizations) took per step
    gpu_saving = busy_ms * slow
    blocking = db.execute("""SELECT sum(a.end_ns - a.start_ns) / 1e6 / (SELECT count(*) FROM windows)
                             FROM api a SEMI JOIN windows w ON w.rank = a.rank AND w.step = a.step
                             WHERE a.name IN ('cudaMemcpyAsync', 'cudaStreamSynchronize')""").fetchone()[0]
    assert f.bound_ms_per_step is not None and f.bound_ms_per_step < gpu_saving
    assert f.bound_ms_per_step <= blocking
    assert f"the {f.bound_ms_per_step:.2f} ms per step the host waited for the GPU" in f.evidence.saving


def test_kernel_bound_quotes_nsight_computes_throughputs() -> None:
    f = _finding(NCU, "kernel_bound")
    ids = _metric_ids(DATA / NCU, {"Compute (SM) Throughput", "Memory Throughput"})
    names = _strings(DATA / NCU)
    by_kernel: dict[str, dict[int, float]] = {}
    for m in pq.read_table(DATA / NCU / "kernel_metrics.parquet").to_pylist():
        if m["metric_id"] in ids.values():
            by_kernel.setdefault(names[m["name_id"]], {})[m["metric_id"]] = m["value"]
    sm = {k: v[ids["Compute (SM) Throughput"]] for k, v in by_kernel.items()}
    mem = {k: v[ids["Memory Throughput"]] for k, v in by_kernel.items()}
    rows = f.evidence.rows
    assert len(rows) == len(by_kernel)
    assert sorted(r["sm_pct"] for r in rows) == pytest.approx(sorted(sm.values()))
    assert sorted(r["memory_pct"] for r in rows) == pytest.approx(sorted(mem.values()))
    for r in rows:  # each kernel can win at most what its busiest unit leaves
        assert r["headroom_ms"] == pytest.approx(r["ms_per_step"] * (1 - max(r["sm_pct"], r["memory_pct"]) / 100))


def test_below_roofline_holds_the_odd_k_product_to_the_h200s_bf16_peak(tmp_path: Path) -> None:
    """The finding's top row against the datasheet and the kernels' own times: the H200's dense BF16 peak
    (989.5 TFLOP/s) and memory (4.8 TB/s) from its datasheet (docs/roofline.md's table), the products' FLOPs
    and bytes by hand for K = 1001, their kernels' time from the Parquet files."""
    f = _finding(CASES["below_roofline"][0], "below_roofline", tmp_path)
    db = _db(DATA / PROBE)
    windows = _gpu_windows(db)
    calls, ns = db.execute("""SELECT count(DISTINCT o.op_id), sum(k.end_ns - k.start_ns)
                              FROM kernels k SEMI JOIN windows w ON w.rank = k.rank AND w.step = k.step
                              JOIN ops o ON o.rank = k.rank AND o.external_id = k.external_id
                              WHERE o.name = 'aten::mm'""").fetchone()
    assert calls == 5 * len(windows) == 35  # five products per step (mm_probe.py)
    flops = 2 * 8192 * 8192 * ODD_K
    nbytes = (8192 * ODD_K + ODD_K * 8192 + 8192 * 8192) * 2
    roof_s = max(flops / 989.5e12, nbytes / 4.8e12) * calls
    assert flops / 989.5e12 > nbytes / 4.8e12  # compute-bound: the BF16 roof decides
    row = f.evidence.rows[0]
    assert (row["op"], row["dtype"], row["peak"]) == ("aten::mm", "bfloat16", "BF16 tensor")
    assert row["detail"] == f"M=8192 N=8192 K={ODD_K}" and row["input_shapes"] == ODD_SHAPES
    assert row["cause"] == f"K={ODD_K} not a multiple of 8 (bfloat16 on tensor cores)"
    assert row["calls_per_step"] == pytest.approx(calls / len(windows))
    assert row["ms_per_step"] == pytest.approx(ns / 1e6 / len(windows))
    assert row["peak_pct"] == pytest.approx(100 * roof_s / (ns / 1e9))
    assert row["peak_pct"] < 10  # the real products ran at ~78% of the roofline with K = 8192
    saving = (ns / 1e9 - roof_s / 0.7) / len(windows) * 1e3  # the time above 70% of the roofline, per step
    assert row["saving_ms_per_step"] == pytest.approx(saving)
    # the product is the finding's whole weight: the probe's other ops are a few microseconds per step
    cut = sum(r["saving_ms_per_step"] for r in f.evidence.rows)
    assert saving / cut > 0.99 and f"takes {ms(cut)} less kernel time per step" in f.evidence.saving
    assert "Pad the matrix products' K and N" in f.advice
    # the probe never waits for the GPU inside a step (one synchronize after the loop): the step could not
    # shrink, so the bound is 0 however much kernel time the products would give back
    blocking = db.execute("""SELECT count(*) FROM api a SEMI JOIN windows w ON w.rank = a.rank AND w.step = a.step
                             WHERE a.name LIKE '%Synchronize%' OR a.name LIKE 'cudaMemcpy%'""").fetchone()[0]
    assert blocking == 0 and db.execute("SELECT count(*) FROM sync").fetchone()[0] == 0
    assert f.bound_ms_per_step == 0 and "the 0.00 ms per step the host waited for the GPU" in f.evidence.saving


# ---- the stored cases' figures against the profile's files --------------------------------------------------


def test_high_step_variance_quotes_the_spread_of_the_timed_steps() -> None:
    """The CNN's 23 steps timed without the tracer: their spread, median and the slowest, from steps.parquet."""
    f = _finding(CNN, "high_step_variance")
    timed = _timed_steps(_db(DATA / CNN))
    t = np.array([(e - s) / 1e6 for _, _, s, e in timed])
    med = float(np.median(t))
    excess = float(np.maximum(t - med, 0).mean())  # each step over the median brought down to it, per step
    assert f.bound_ms_per_step == pytest.approx(excess)
    assert f.bound_pct == pytest.approx(100 * excess / t.mean())
    assert f.severity == "medium"  # 5-20% of the step
    slowest = max(timed, key=lambda r: r[3] - r[2])
    assert f.evidence.rows[0]["step"] == slowest[1] and f.evidence.rows[0]["step_ms"] == pytest.approx(t.max())
    assert f.evidence.rows[0]["over_median_ms"] == pytest.approx(t.max() - med)
    assert (
        f"over {len(t)} timed steps the step time has a standard deviation of {ms(float(t.std(ddof=1)))} "
        f"({100 * t.std(ddof=1) / t.mean():.0f}% of the {ms(float(t.mean()))} mean)" in f.evidence.text
    )
    assert f"against a median of {ms(med)}" in f.evidence.text


def test_memory_underused_quotes_the_peak_the_capacity_and_the_batch_that_fits() -> None:
    f = _finding(CNN, "memory_underused")
    row = f.evidence.rows[0]
    peak = _selected_peak(DATA / CNN, "mem_used")
    total = json.loads((DATA / CNN / "meta.json").read_text())["devices"][0]["memory_bytes"]
    assert row["peak_gb"] == pytest.approx(peak / 1e9) and row["total_gb"] == pytest.approx(total / 1e9)
    assert row["peak_pct"] == pytest.approx(100 * peak / total)
    # the largest batch factor that keeps the peak within 90% of the memory, at most 4x (DLProf's step)
    factor = min(4, int(0.9 * total // peak))
    assert factor == 4 and row["batch_factor"] == factor
    # the GPU's busy share of the traced steps: the union of its kernels, copies and sets over their time
    db = _db(DATA / CNN)
    windows = _gpu_windows(db)
    work = db.execute(
        "SELECT start_ns, end_ns FROM kernels UNION ALL SELECT start_ns, end_ns FROM memcpy "
        "UNION ALL SELECT start_ns, end_ns FROM memset"
    ).fetchall()
    busy = sum(_union_ns([(max(a, s), min(b, e)) for a, b in work if b > s and a < e]) for _, _, s, e in windows)
    assert row["gpu_busy_pct"] == pytest.approx(100 * busy / sum(e - s for _, _, s, e in windows))
    assert row["gpu_busy_pct"] < 70
    # the launch waits a 4x batch pays once for 4x the samples
    assert f.bound_ms_per_step == pytest.approx(row["fixed_idle_ms_per_step"] * (1 - 1 / factor))


def test_straggler_names_the_slowed_rank_and_its_lag() -> None:
    """ddp2_straggler's rank 1 spent 25 ms more per step in Python (the bench's --slow-rank 1 --python-ms 25):
    in the steps timed without the tracer, rank 0 waits for it in its syncs (dlscope's 'sync' hook phases)."""
    case = "advice_truth_dist/ddp2_straggler.dlscope"
    f = _finding(case, "straggler")
    command = json.loads((DATA / case / "meta.json").read_text())["command"]
    slow_rank = int(command[command.index("--slow-rank") + 1])
    assert slow_rank == 1 and f.evidence.rows[0]["rank"] == slow_rank
    db = _db(DATA / case)
    timed = _timed_steps(db)
    syncs = db.execute("SELECT rank, start_ns, end_ns FROM phases WHERE name = 'sync' AND source = 'hook'").fetchall()
    wait = {(r, st): _covered_ns(a, b, [(x, y) for rr, x, y in syncs if rr == r]) for r, st, a, b in timed}
    steps = sorted({st for _, st, _, _ in timed})
    lag = np.array([wait[(0, st)] - wait[(1, st)] for st in steps]) / 1e6  # how much longer rank 0 waited
    step_ms = float(np.mean([(e - s) / 1e6 for _, _, s, e in timed]))
    assert f.bound_ms_per_step == pytest.approx(float(np.median(lag)))
    assert abs(f.bound_ms_per_step - 25.0) < 1.0  # the Python it was given
    assert f.bound_pct == pytest.approx(100 * float(np.median(lag)) / step_ms)
    assert f.severity == "high"  # 20-50% of the step
    assert (
        f"over {len(steps)} steps measured without tracing" in f.evidence.text
        and f"rank 1 waited less in {int((lag > 0).sum())} of {len(steps)} steps" in f.evidence.text
    )
    assert f"of the {ms(step_ms)} step" in f.evidence.text


def test_comm_exposed_quotes_the_communication_no_compute_covered() -> None:
    """Host 0 of a two-host DDP job: its NCCL kernels against its other kernels, in the traced steps."""
    case = "advice_truth_dist/lease4_twolaunch_host0.dlscope"
    f = _finding(case, "comm_exposed")
    db = _db(DATA / case)
    windows = _gpu_windows(db)
    assert {w[0] for w in windows} == {0}
    kernels = db.execute("""SELECT k.start_ns, k.end_ns, k.name ILIKE 'nccl%'
                            FROM kernels k SEMI JOIN windows w ON w.rank = k.rank AND w.step = k.step""").fetchall()
    comm = _union_ns([(a, b) for a, b, c in kernels if c])
    compute = _union_ns([(a, b) for a, b, c in kernels if not c])
    both = _union_ns([(a, b) for a, b, _ in kernels])
    exposed_ms = (both - compute) / 1e6 / len(windows)  # communication time no compute ran alongside
    row = f.evidence.rows[0]
    assert row["rank"] == 0 and len(f.evidence.rows) == 1
    assert row["comm_ms"] == pytest.approx(comm / 1e6 / len(windows))
    assert row["overlap_pct"] == pytest.approx(100 * (comm + compute - both) / comm)
    assert row["exposed_ms"] == pytest.approx(exposed_ms)
    assert row["wait_ms"] == 0  # one rank in this profile: no peer's collective to wait for
    assert row["exposed_transfer_ms"] == pytest.approx(exposed_ms) and f.bound_ms_per_step == pytest.approx(exposed_ms)
    step_ms = float(np.mean([(e - s) / 1e6 for _, _, s, e in _timed_steps(db)]))
    assert f.bound_pct == pytest.approx(100 * exposed_ms / step_ms)
    assert f.severity == "medium"


def test_fsdp_exposed_gathers_counts_what_no_compute_covered_after_the_first_gather() -> None:
    """fsdp4_balanced_a: each rank's FSDP all-gather kernels, less the time its compute kernels covered, per
    traced step; the step's first gather (nothing runs before it) left out; the rank with the least decides."""
    case = "advice_truth_dist/fsdp4_balanced_a.dlscope"
    f = _finding(case, "fsdp_exposed_gathers")
    db = _db(DATA / case)
    per_rank, first_of_rank = {}, {}
    windows = _gpu_windows(db)
    for rank in sorted({w[0] for w in windows}):
        steps = [w[1] for w in windows if w[0] == rank]
        kernels = db.execute(
            """SELECT k.step, k.start_ns, k.end_ns, lower(k.name)
                                FROM kernels k SEMI JOIN windows w ON w.rank = k.rank AND w.step = k.step
                                WHERE k.rank = ? ORDER BY k.start_ns""",
            [rank],
        ).fetchall()
        compute = [(a, b) for _, a, b, n in kernels if "nccl" not in n]
        gathers = [(st, a, b) for st, a, b, n in kernels if "nccl" in n and "allgather" in n]
        exposed = [(st, (b - a) - _covered_ns(a, b, compute)) for st, a, b in gathers]
        first = {st: next(x for s2, x in exposed if s2 == st) for st in steps}
        per_rank[rank] = (sum(x for _, x in exposed) - sum(first.values())) / 1e6 / len(steps)
        first_of_rank[rank] = sum(first.values()) / 1e6 / len(steps)
    least = min(per_rank, key=lambda r: per_rank[r])
    assert f.bound_ms_per_step == pytest.approx(per_rank[least])
    assert f.evidence.text.startswith(f"on rank {least} (the rank with the least)")
    root = [r for r in f.evidence.rows if r["unit"] == "(root)"]
    assert len(root) == 1 and root[0]["exposed_ms_per_step"] == pytest.approx(first_of_rank[least])
    assert f.severity == "low"  # 3% of the step, and no GPU phase marks to bound the traced exposure


def test_small_collectives_counts_the_messages_under_1_mib() -> None:
    """small_collectives_naive all-reduces each gradient on its own (the bench's --grad-sync naive)."""
    case = "advice_truth_dist/small_collectives_naive.dlscope"
    f = _finding(case, "small_collectives")
    db = _db(DATA / case)
    # every collective is an all-reduce, whose message is a rank's input buffer (nccl-tests' "size")
    assert [r[0] for r in db.execute("SELECT DISTINCT name FROM comms").fetchall()] == ["allreduce"]
    per_rank = {}
    for rank in (0, 1):
        n_steps = sum(1 for w in _gpu_windows(db) if w[0] == rank)
        small = db.execute(
            """SELECT c.end_ns - c.start_ns, c.in_bytes
                              FROM comms c SEMI JOIN windows w ON w.rank = c.rank AND w.step = c.step
                              WHERE c.rank = ? AND c.in_bytes < 1024 * 1024""",
            [rank],
        ).fetchall()
        total, longest = sum(d for d, _ in small), max(d for d, _ in small)
        # fused into one message, at least the longest would remain in each step
        per_rank[rank] = (
            len(small),
            n_steps,
            total,
            (total - longest * n_steps) / 1e6 / n_steps,
            sum(b for _, b in small) / len(small),
        )
    rank = min(per_rank, key=lambda r: per_rank[r][3])  # every rank must gain for the step to
    n, steps, total, saving, mean_bytes = per_rank[rank]
    assert f.bound_ms_per_step == pytest.approx(saving)
    assert f.evidence.text.startswith(
        f"{n / steps:.0f} collectives under 1 MiB per step on rank {rank} "
        f"({mean_bytes / 1024:.0f} KiB on average), {ms(total / 1e6 / steps)} per step"
    )
    assert f.evidence.rows[0]["operation"] == "allreduce" and f.evidence.rows[0]["count"] == n
    assert f.evidence.rows[0]["mean_bytes"] == pytest.approx(mean_bytes)
