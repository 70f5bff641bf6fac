"""launch_sum pinned to Holistic Trace Analysis' ``get_cuda_kernel_launch_stats``.

HTA's numbers are in tests/data/hta/launch_stats.json (HTA 0.5.0 at full timestamp resolution;
tests/data/hta/make_launch_stats_reference.py made it and says how): per rank and launching call,
statistics of HTA's per-launch rows (CPU duration of the call, GPU duration of the work, launch
delay). The traces and HTA's step choice are those of the temporal breakdown check.

What is compared, per launching call HTA knows:

* the calls and their host duration: launch_sum's ``calls``, ``gpu_items``, ``kernels``,
  ``total_ms``, ``mean_ms``, ``p50_ms``, ``p95_ms``, ``max_ms``;
* the launch delay. The definitions differ on purpose: launch_sum's delay is the GPU start minus
  the *start* of the launch call, HTA's ``launch_delay`` the GPU start minus the call's *end*,
  clipped at 0 (where the work starts before the call returns). launch_sum's delay statistics are
  compared with HTA's rows' start-to-start delay (the reference's ``start_delay``), and HTA's own
  column with them through its sum: sum(HTA launch_delay) = sum(delay) - sum(call duration) +
  what HTA clipped (nothing where ``clipped`` is 0);
* the GPU duration of the launched work: launch_sum reports it only through the kernel count and
  the small-kernel shares, so HTA's statistics are compared with the GPU rows launch_sum joins to
  the calls (the same selection and join).

Known, deliberate differences:

* HTA takes the launches of four runtime calls only (cudaLaunchKernel, cudaLaunchKernelExC,
  cudaMemcpyAsync, cudaMemsetAsync, plus MTIA's runFunction). launch_sum has a row for every call
  that launched GPU work: the driver API's cuLaunchKernel / cuLaunchKernelEx (Triton, cuBLASLt),
  cudaGraphLaunch, HIP's calls, MTIA's enqueueCommand ... Those rows have no HTA counterpart, and
  launch_sum's ``all`` row counts them.
* HTA's small-kernel finding flags a kernel shorter than its own launch call; launch_sum's small
  kernels are those shorter than the median launch call of the selection. Not compared.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.gpu_work import gpu_work_sql, selected_sql
from dlscope.analysis.reports import launch_sum

from .conftest import DATA
from .report_helpers import hta_entry_id, hta_entry_source, hta_selection, imported

REFERENCE = json.loads((DATA / "hta" / "launch_stats.json").read_text())
HTA_CALLS = {
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "runFunction - job_prep_and_submit_for_execution",
}
# us. Durations are read exactly by both; HTA's timestamps are floating-point microseconds, which
# hold a few ns where a trace's times are small
TOLERANCE_US = 0.002
KNOWN_DIFFERENCES = {
    # this trace's timestamps are ns since the epoch (1.7e15 us): a float64 holds them to 0.25 us
    # in HTA, so HTA's delays (differences of two timestamps) are off by up to 0.25 us
    "corpus/hta/ns_resolution_trace": 0.25,
}


def _open(entry: dict, tmp_path_factory) -> ProfileData:
    src = hta_entry_source(entry)
    if src is None or not src.exists():
        pytest.skip(f"{entry['path']} is not here (shared/ beside the clone)")
    path = imported(src, tmp_path_factory)
    return ProfileData.open(path, hta_selection(ProfileData.open(path), entry["include_last_profiler_step"]))


def _gpu_side(data: ProfileData) -> dict[str, dict]:
    """Per launching call: the GPU rows launch_sum joins to the calls (durations in us)."""
    rows = data.rows(f"""
        SELECT a.name, count(*) AS n, sum(g.end_ns - g.start_ns) / 1e3 AS sum, avg(g.end_ns - g.start_ns) / 1e3 AS mean,
               quantile_cont(g.end_ns - g.start_ns, 0.5) / 1e3 AS p50,
               quantile_cont(g.end_ns - g.start_ns, 0.95) / 1e3 AS p95, max(g.end_ns - g.start_ns) / 1e3 AS max
        FROM ({gpu_work_sql(data)}) g JOIN ({selected_sql(data, "api")}) a
          ON a.rank = g.rank AND a.correlation_id = g.correlation_id
        GROUP BY a.name""")
    return {r.pop("name"): r for r in rows}


@pytest.mark.parametrize("entry", REFERENCE["entries"], ids=hta_entry_id)
def test_launch_stats_agree_with_hta(entry, tmp_path_factory):
    data = _open(entry, tmp_path_factory)
    ours = {r["name"]: r for r in launch_sum.compute(data).table.to_pylist()}
    gpu = _gpu_side(data)
    hta: dict[str, list[dict]] = defaultdict(list)
    for h in entry["rows"]:
        hta[h["call"]].append(h)
    # every call HTA counts is a row here; the other rows are calls HTA does not take
    assert set(hta) <= set(ours) and set(hta) <= HTA_CALLS
    assert not (set(ours) - set(hta) - {"all"}) & HTA_CALLS, set(ours)
    delay_tol = KNOWN_DIFFERENCES.get(entry["path"], TOLERANCE_US)

    def close(a_ms: float, b_us: float, tol: float = TOLERANCE_US) -> bool:
        return abs(a_ms * 1e3 - b_us) <= tol + 1e-9 * abs(b_us)

    for call, hs in hta.items():
        o, g = ours[call], gpu[call]
        n = sum(h["count"] for h in hs)
        cpu_sum = sum(h["cpu_duration"]["sum"] for h in hs)
        assert o["calls"] == o["gpu_items"] == g["n"] == n, (call, o, n)
        assert o["kernels"] == sum(h["kernels"] for h in hs)
        assert close(o["total_ms"], cpu_sum), (call, o["total_ms"], cpu_sum)
        assert g["sum"] == pytest.approx(sum(h["gpu_duration"]["sum"] for h in hs), abs=TOLERANCE_US, rel=1e-9)
        delay_sum = o["delay_mean_ms"] * 1e3 * n
        assert delay_sum == pytest.approx(sum(h["start_delay"]["sum"] for h in hs), abs=delay_tol * n, rel=1e-9)
        # HTA's own launch delay: the start-to-start delay less the call, clipped at 0
        hta_delay_sum = sum(h["launch_delay"]["sum"] for h in hs)
        if any(h["clipped"] for h in hs):
            assert hta_delay_sum > delay_sum - cpu_sum - delay_tol * n
        else:
            assert hta_delay_sum == pytest.approx(delay_sum - cpu_sum, abs=delay_tol * n, rel=1e-9)
        if len(hs) > 1:  # several ranks: the distributions are HTA's per rank
            continue
        h = hs[0]
        for s in ("mean", "p50", "p95", "max"):
            assert close(o[f"{s}_ms"], h["cpu_duration"][s]), (call, s, o, h["cpu_duration"])
            assert close(o[f"delay_{s}_ms"], h["start_delay"][s], delay_tol), (call, s, o, h["start_delay"])
            assert g[s] == pytest.approx(h["gpu_duration"][s], abs=TOLERANCE_US, rel=1e-9), (call, s, g, h)


def test_reference_covers_the_fixtures_and_the_corpus():
    paths = {e["path"] for e in REFERENCE["entries"]}
    assert {f"tests/data/kineto/h100_{n}.trace.json.gz" for n in ("resnet50_phases", "gpt6_fp32", "gpt6_bf16")} <= paths
    assert sum(e["path"].startswith("corpus/") and bool(e["rows"]) for e in REFERENCE["entries"]) >= 10
    assert any(len(e["ranks"]) > 1 for e in REFERENCE["entries"])
    assert REFERENCE["ns_rounding_disabled"] and "HolisticTraceAnalysis 0.5.0" in REFERENCE["tool"]
    # HTA clipped some delays to 0 (work that started before its launch call returned)
    assert any(h["clipped"] for e in REFERENCE["entries"] for h in e["rows"])
