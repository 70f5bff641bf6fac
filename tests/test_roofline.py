"""The GPU peak table (analysis/core/hardware.py) and the roofline report, on real full-mode
profiles: every number checked against DuckDB over the profile's own Parquet files and the
datasheet constants by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from dlscope.analysis import REPORTS
from dlscope.analysis.core import hardware as hw
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.reports import roofline as rl
from dlscope.store.meta import Meta

from .conftest import DATA, assert_one_line_error, need_file
from .report_helpers import fixture_path, imported, make_profile

ROOF = DATA / "roofline"
GPT_BF16 = ROOF / "gpt_bf16_full.dlscope"
GPT_FUSED = ROOF / "gpt_fused_full.dlscope"
MM_PROBE = ROOF / "mm_probe_bf16.dlscope"
OLD_FULL = DATA / "advice_truth" / "gpt_baseline_full.dlscope"
DEFAULT_MODE = DATA / "advice_truth" / "gpt_baseline_default.dlscope"


# ---- the peak table ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,sms,want",
    [
        ("NVIDIA H100 80GB HBM3", 132, "H100 SXM"),
        ("NVIDIA H100 PCIe", 114, "H100 PCIe"),
        ("NVIDIA H100 NVL", None, "H100 NVL"),
        ("NVIDIA H200", 132, "H200"),
        ("NVIDIA H200 NVL", None, "H200 NVL"),
        ("Tesla V100-SXM2-16GB", 80, "V100 SXM2"),
        ("Tesla V100-SXM2-32GB", None, "V100 SXM2"),
        ("NVIDIA A100-SXM4-40GB", 108, "A100 SXM 40GB"),
        ("NVIDIA A100-SXM4-80GB", None, "A100 SXM 80GB"),
        ("NVIDIA A100 80GB PCIe", None, "A100 PCIe 80GB"),
        ("NVIDIA A100-PCIE-40GB", None, "A100 PCIe 40GB"),
        ("NVIDIA L4", 58, "L4"),
        ("NVIDIA L40S", 142, "L40S"),
        ("NVIDIA L40", None, "L40"),
        ("Tesla T4", 40, "T4"),
        ("NVIDIA A10", 72, "A10"),
        ("AMD Instinct MI250X", 110, "MI250X (one GCD)"),
        ("AMD Instinct MI300X", 304, "MI300X"),
    ],
)
def test_names_decide_the_gpu(name, sms, want):
    found = hw.lookup(name, sms)
    assert found.peaks is not None and found.peaks.name == want, found


@pytest.mark.parametrize(
    "name,sms,why",
    [
        ("NVIDIA GH200 480GB", None, "not in dlscope's table"),
        ("NVIDIA A100-PG509-200", 108, "not in dlscope's table"),
        ("NVIDIA A10G", None, "not in dlscope's table"),
        ("AMD Radeon Graphics", None, "not in dlscope's table"),
        ("AMD Instinct MI250X / MI250", None, "does not say which GPU"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None, "MIG slice"),
        ("NVIDIA H100 80GB HBM3", 16, "a partition or another variant"),
        ("AMD Instinct MI300X", 38, "a partition or another variant"),
        (None, None, "does not name its GPU"),
    ],
)
def test_unknown_gpus_get_no_peaks_and_say_why(name, sms, why):
    found = hw.lookup(name, sms)
    assert found.peaks is None and why in found.why_not


def test_peaks_are_the_datasheets_dense_figures():
    h = hw.H100_SXM
    assert (h.fp32, h.tf32, h.bf16, h.fp16, h.fp8, h.int8, h.hbm_tbs) == (
        67,
        989 / 2,
        1979 / 2,
        1979 / 2,
        3958 / 2,
        3958 / 2,
        3.35,
    )
    assert (hw.H100_PCIE.bf16, hw.H100_PCIE.hbm_tbs, hw.H200_SXM.hbm_tbs) == (1513 / 2, 2.0, 4.8)
    assert (hw.A100_SXM_80.tf32, hw.A100_SXM_80.bf16, hw.A100_SXM_40.hbm_tbs, hw.A100_SXM_80.hbm_tbs) == (
        156,
        312,
        1.555,
        2.039,
    )
    assert (hw.V100_SXM2.fp16, hw.V100_SXM2.tf32, hw.V100_SXM2.bf16) == (125, None, None)
    assert (hw.L4.bf16, hw.L4.fp8, hw.L40S.bf16, hw.L40S.fp8) == (242 / 2, 485 / 2, 362.05, 733)
    # an MI250X package is two dies, each its own device: half of the package's figures
    assert (hw.MI250X.fp16, hw.MI250X.fp32_matrix, hw.MI250X.hbm_tbs) == (383 / 2, 95.7 / 2, 3.2768 / 2)
    assert (hw.MI300X.bf16, hw.MI300X.fp8, hw.MI300X.hbm_tbs) == (1307.4, 2614.9, 5.3)
    for _, p in hw.GPUS:
        assert p.source and p.hbm_tbs > 0 and p.fp32 > 0
        low = [x for x in (p.fp16, p.bf16) if x]
        assert low and all(x >= (p.tf32 or 0) for x in low)  # 16-bit tensor math is the faster path
        assert p.fp8 is None or p.fp8 >= max(low)


def test_the_advice_reads_the_same_ratios_as_before():
    # the rules' ratios by compute capability, derived from the table, are what they always were
    assert hw.NVIDIA_RATIOS == {
        (7, 0): (None, 8.0),
        (7, 5): (None, 8.0),
        (8, 0): (8.0, 16.0),
        (8, 6): (2.0, 4.0),
        (8, 9): (2.0, 4.0),
        (9, 0): (7.4, 14.8),
    }
    assert hw.DEFAULT_NVIDIA == (8.0, 16.0) and hw.AMD_LOW_OVER_FP32_MATRIX == 4.0
    for name, cap in (
        ("NVIDIA H100 80GB HBM3", (9, 0)),
        ("NVIDIA H100 PCIe", (9, 0)),
        ("NVIDIA H200", (9, 0)),
        ("NVIDIA A100-SXM4-40GB", (8, 0)),
        ("NVIDIA L4", (8, 9)),
        ("NVIDIA RTX 4090", (8, 9)),
    ):
        d = hw.Device(name, "nvidia", cap, None)
        assert (d.tf32_speedup(), d.low_speedup(False)) == hw.NVIDIA_RATIOS[cap], name
    assert hw.Device("AMD Instinct MI300X", "amd", None, None).low_speedup(False) == 8.0  # 1307.4 / 163.4
    assert hw.Device("AMD Radeon Graphics", "amd", None, None).low_speedup(False) == 4.0


def test_compute_peak_picks_the_path_the_kernels_took():
    h = hw.H100_SXM
    assert h.compute_peak("float32", True, True) == (494.5, "TF32 tensor")
    assert h.compute_peak("float32", True, False) == (67.0, "FP32 (CUDA cores)")
    assert h.compute_peak("bfloat16", True, True)[0] == 989.5
    assert h.compute_peak("bfloat16", False, False)[0] == 67.0  # elementwise work: CUDA cores
    assert h.compute_peak("float8_e4m3fn", True, True)[0] == 1979.0
    assert hw.V100_SXM2.compute_peak("bfloat16", True, True)[0] is None
    assert hw.MI300X.compute_peak("float32", True, False) == (163.4, "FP32 matrix")


# ---- the report on real profiles -----------------------------------------------------------------


def _q(sql: str) -> list[tuple]:
    return duckdb.connect().execute(sql).fetchall()


def _launch_sql(profile: Path) -> str:
    """Independent of dlscope: the kernels of the non-warm-up steps, joined to their launching op by
    external id, with the op's name, shapes and argument values from the strings table."""
    p = str(profile)
    return f"""
        WITH s AS (SELECT id, value FROM '{p}/strings.parquet'),
             k AS (SELECT * FROM '{p}/kernels.parquet'
                   WHERE step IN (SELECT step FROM '{p}/steps.parquet' WHERE NOT warmup)),
             o AS (SELECT o.rank, o.op_id, o.external_id, n.value AS name, sh.value AS shapes
                   FROM '{p}/ops.parquet' o JOIN s n ON n.id = o.name_id LEFT JOIN s sh ON sh.id = o.input_shapes_id)
        SELECT o.name, o.shapes, count(DISTINCT o.op_id) AS calls, sum(k.end_ns - k.start_ns)::BIGINT AS ns
        FROM k JOIN o ON o.rank = k.rank AND o.external_id = k.external_id GROUP BY ALL"""


def _rows(profile: Path) -> list[dict]:
    data = ProfileData.open(profile)
    return REPORTS["roofline"].compute(data).rows()


def _row(rows: list[dict], op: str, shapes: str) -> dict:
    (r,) = [r for r in rows if r["op"] == op and r["input_shapes"] == shapes]
    return r


def test_bf16_gpt_gemm_and_attention_against_duckdb_and_the_datasheet():
    need_file(GPT_BF16)
    rows = _rows(GPT_BF16)
    launched = {(n, s): (c, ns) for n, s, c, ns in _q(_launch_sql(GPT_BF16))}
    steps = _q(f"SELECT count(*) FROM '{GPT_BF16}/steps.parquet' WHERE NOT warmup")[0][0]
    h200 = hw.H200_SXM
    # the LM head's GEMM: bf16 on tensor cores, compute-bound
    shapes = "[[4096,768],[768,50304]]"
    r = _row(rows, "aten::mm", shapes)
    calls, ns = launched[("aten::mm", shapes)]
    flops, nbytes = 2 * 4096 * 50304 * 768, (4096 * 768 + 768 * 50304 + 4096 * 50304) * 2
    assert (r["calls"], r["flops"], r["bytes"], r["dtype"]) == (calls, flops, nbytes, "bfloat16")
    assert r["gpu_ms"] == pytest.approx(ns / 1e6)
    assert r["tflops"] == pytest.approx(flops * calls / ns / 1e3)
    assert r["tbs"] == pytest.approx(nbytes * calls / ns / 1e3)
    roof_s = max(flops / (h200.bf16 * 1e12), nbytes / (h200.hbm_tbs * 1e12)) * calls
    assert r["peak_pct"] == pytest.approx(100 * roof_s / (ns / 1e9))
    assert r["ridge"] == pytest.approx(989.5 / 4.8) and r["bound"] == "compute" and r["peak"] == "BF16 tensor 989.5"
    assert r["saving_ms_per_step"] == pytest.approx(max(0.0, ns / 1e9 - roof_s / 0.7) / steps * 1e3, abs=1e-9)
    # causal cuDNN attention's backward: half of 2*b*h*s*s*(3d + 2d)
    shapes = (
        "[[8,12,512,64],[8,12,512,64],[8,12,512,64],[8,12,512,64],[8,12,512,64],[8,12,512,1],"
        "[],[],[],[],[],[],[],[],[],[]]"
    )
    r = _row(rows, "aten::_cudnn_attention_backward", shapes)
    assert r["flops"] == 2 * 96 * 512 * 512 * (5 * 64) // 2 and "causal" in r["detail"]
    assert r["gpu_ms"] == pytest.approx(launched[("aten::_cudnn_attention_backward", shapes)][1] / 1e6)
    # autocast's cast of the logits back to fp32: a copy, read bf16 and written fp32
    (r,) = [
        r
        for r in rows
        if r["op"] == "aten::copy_"
        and r["input_shapes"] == "[[4096,50304],[4096,50304],[]]"
        and r["detail"] == "bfloat16->float32"
    ]
    assert r["flops"] == 0 and r["bytes"] == 4096 * 50304 * (2 + 4) and r["bound"] == "memory"
    assert r["peak_pct"] == pytest.approx(100 * r["bytes"] * r["calls"] / 4.8e12 / (r["gpu_ms"] / 1e3))


def test_every_kernel_is_in_one_row_or_named_as_unlinked():
    for profile in (GPT_BF16, GPT_FUSED):
        need_file(profile)
        rows = _rows(profile)
        linked = sum(ns for *_, ns in _q(_launch_sql(profile)))
        assert sum(r["gpu_ms"] for r in rows) == pytest.approx(linked / 1e6)
        # each unmodelled row says why; each modelled row has its work
        for r in rows:
            assert (r["why"] is None) == (r["flops"] is not None), r


def test_the_optimizer_and_fp32_paths_of_the_fused_gpt():
    need_file(GPT_FUSED)
    rows = _rows(GPT_FUSED)
    (adam,) = [r for r in rows if r["op"] == "aten::_fused_adamw_"]
    assert adam["why"] == "the profiler recorded no shapes for its tensor lists" and adam["flops"] is None
    # fp32 GEMMs with TF32 off ran on the CUDA cores (kernel names): held to the FP32 peak
    r = _row(rows, "aten::mm", "[[4096,768],[768,50304]]")
    assert r["peak"] == "FP32 (CUDA cores) 67" and r["dtype"] == "float32" and r["bound"] == "compute"
    # the memory-efficient attention read causal from custom_mask_type
    eff = [r for r in rows if r["op"] == "aten::_efficient_attention_forward"]
    assert eff and all("causal" in r["detail"] for r in eff)


def test_the_probe_reaches_what_the_h200_is_known_to_do():
    # 8192^3 bf16 products run at 770-800 TFLOP/s on this machine (device KINDS.md, measured apart)
    # and a streaming fp32 multiply at about 4.3 TB/s: near 80% and 90% of the datasheet
    need_file(MM_PROBE)
    rows = _rows(MM_PROBE)
    mm = _row(rows, "aten::mm", "[[8192,8192],[8192,8192]]")
    assert mm["calls"] == 35 and 700 < mm["tflops"] < 850 and 70 < mm["peak_pct"] < 86
    mul = _row(rows, "aten::mul", "[[268435456],[]]")
    assert mul["bytes"] == 2 * 4 * 2**28 + 8 and 80 < mul["peak_pct"] < 100 and mul["bound"] == "memory"


def test_resnet_convolutions_from_an_imported_trace(tmp_path_factory):
    path = imported(fixture_path("h100_resnet50_phases"), tmp_path_factory)
    rows = _rows(path)
    launched = {(n, s): (c, ns) for n, s, c, ns in _q(_launch_sql(path))}
    shapes = "[[64,3,224,224],[64,3,7,7],[],[],[],[],[],[],[]]"
    r = _row(rows, "aten::cudnn_convolution", shapes)
    calls, ns = launched[("aten::cudnn_convolution", shapes)]
    assert r["flops"] == 2 * 64 * 64 * 112 * 112 * 3 * 7 * 7 and (r["calls"], r["gpu_ms"]) == (
        calls,
        pytest.approx(ns / 1e6),
    )
    assert r["peak"] == "TF32 tensor 494.5"  # cuDNN's kernels are tf32 xmma ones
    # the first layer's backward computes only the weight gradient (output_mask recorded)
    first = _row(
        rows, "aten::convolution_backward", "[[64,64,112,112],[64,3,224,224],[64,3,7,7],[],[],[],[],[],[],[],[]]"
    )
    assert first["flops"] == r["flops"] and first["detail"] == "grads: weight"
    pool = [x for x in rows if x["op"] == "aten::max_pool2d_with_indices"]
    assert pool and pool[0]["why"] == "no model for aten::max_pool2d_with_indices"


def test_a_profile_without_argument_values_lists_what_they_would_decide():
    need_file(OLD_FULL)
    result = REPORTS["roofline"].compute(ProfileData.open(OLD_FULL))
    rows = result.rows()
    attn = [r for r in rows if r["op"] == "aten::_efficient_attention_forward"]
    assert attn and attn[0]["why"] == "the value of custom_mask_type (the causal mask) was not recorded"
    # index_select needs its dim: its kernel goes to the embedding around it, which needs nothing more
    emb = _row(rows, "aten::embedding", "[[50304,768],[8,512],[],[],[]]")
    assert emb["bytes"] == 4096 * 8 + 2 * 4096 * 768 * 4 and not [r for r in rows if r["op"] == "aten::index_select"]
    assert any("argument values" in n for n in result.notes)
    gemm = _row(rows, "aten::addmm", "[[2304],[4096,768],[768,2304],[],[]]")
    assert gemm["flops"] == 2 * 4096 * 2304 * 768


def test_without_shapes_the_report_says_full_mode(cli):
    need_file(DEFAULT_MODE)
    r = cli("stats", DEFAULT_MODE, "--report", "roofline")
    assert r.code == 2 and "--mode full" in r.err
    assert_one_line_error(r.err)


def test_an_unknown_gpu_gets_no_roofline(tmp_path):
    need_file(MM_PROBE)
    for name, sms, why in (
        ("NVIDIA A100-PG509-200", 108, "not in dlscope's table"),
        ("NVIDIA H200", 66, "a partition or another variant"),
    ):
        copy = tmp_path / f"p{sms}.dlscope"
        shutil.copytree(MM_PROBE, copy)
        meta = json.loads((copy / "meta.json").read_text())
        for d in meta["devices"]:
            d["name"], d["sms"] = name, sms
        (copy / "meta.json").write_text(json.dumps(meta))
        result = REPORTS["roofline"].compute(ProfileData.open(copy))
        assert not {"ridge", "bound", "peak_pct", "saving_ms_per_step", "peak"} & set(result.table.column_names)
        assert why in result.notes[0]
        mm = _row(result.rows(), "aten::mm", "[[8192,8192],[8192,8192]]")
        assert mm["flops"] == 2 * 8192**3 and mm["tflops"] > 0  # the work and rates still shown


def _synthetic(tmp_path: Path) -> ProfileData:
    """Ops nested as PyTorch nests them: an SDPA decomposed into a matrix product (known) and a
    softmax kernel the model does not know; an embedding whose index_select lacks its dim."""
    f32 = '"float"'
    ops = [
        dict(
            op_id=1,
            name="aten::scaled_dot_product_attention",
            start_ns=0,
            end_ns=100,
            input_shapes="[[2,4,16,8],[2,4,16,8],[2,4,16,8],[],[],[],[],[]]",
            input_types=f'[{f32},{f32},{f32},"","Scalar","Scalar","","Scalar"]',
            input_values='["","","","","0.","False","","False"]',
        ),
        dict(
            op_id=2,
            parent_id=1,
            name="aten::bmm",
            start_ns=10,
            end_ns=20,
            external_id=2,
            input_shapes="[[8,16,8],[8,8,16]]",
            input_types=f"[{f32},{f32}]",
        ),
        dict(
            op_id=3,
            parent_id=1,
            name="aten::_safe_softmax",
            start_ns=30,
            end_ns=40,
            external_id=3,
            input_shapes="[[2,4,16,16],[]]",
            input_types=f'[{f32},"Scalar"]',
        ),
        dict(
            op_id=4,
            name="aten::embedding",
            start_ns=200,
            end_ns=300,
            input_shapes="[[100,8],[32],[],[],[]]",
            input_types=f'[{f32},"longint","Scalar","Scalar","Scalar"]',
        ),
        dict(
            op_id=5,
            parent_id=4,
            name="aten::index_select",
            start_ns=210,
            end_ns=290,
            external_id=5,
            input_shapes="[[100,8],[],[32]]",
            input_types=f'[{f32},"Scalar","longint"]',
        ),
    ]
    for o in ops:
        o.update(pid=1, tid=1)
    kernels = [
        dict(
            device=0,
            stream=7,
            start_ns=1000 + 100 * i,
            end_ns=1050 + 100 * i,
            external_id=x,
            correlation_id=x,
            name=f"k{x}",
        )
        for i, x in enumerate((2, 3, 5))
    ]
    meta = Meta(devices=[{"name": "NVIDIA H100 80GB HBM3", "sms": 132, "compute_capability": "9.0"}])
    return make_profile(tmp_path, meta, ops=ops, kernels=kernels)


def test_a_known_op_never_owns_kernels_beside_known_ops_inside_it(tmp_path):
    result = REPORTS["roofline"].compute(_synthetic(tmp_path))
    rows = {r["op"]: r for r in result.rows()}
    assert set(rows) == {"aten::bmm", "aten::_safe_softmax", "aten::embedding"}
    assert rows["aten::bmm"]["flops"] == 2 * 8 * 16 * 16 * 8 and rows["aten::bmm"]["gpu_ms"] == 50e-6
    # the softmax's kernel stays unmodelled: the SDPA's count would include the bmm's work
    assert rows["aten::_safe_softmax"]["why"] == "no model for aten::_safe_softmax"
    # the index_select lacks its dim: the embedding around it owns its kernel
    assert rows["aten::embedding"]["bytes"] == 32 * 8 + 2 * 32 * 8 * 4 and rows["aten::embedding"]["calls"] == 1


def test_the_kineto_importer_keeps_argument_values(tmp_path_factory):
    path = imported(fixture_path("h100_resnet50_phases"), tmp_path_factory)
    ((n, vals),) = _q(
        f"""SELECT count(*), any_value(s.value) FROM '{path}/ops.parquet' o
                       JOIN '{path}/strings.parquet' n ON n.id = o.name_id
                       JOIN '{path}/strings.parquet' s ON s.id = o.input_values_id
                       WHERE n.value = 'aten::cudnn_convolution'
                         AND s.value LIKE '%[2,2]%' AND s.value LIKE '%[3,3]%'"""
    )
    assert n == 3 and json.loads(vals)[2:4] == ["[3,3]", "[2,2]"]  # the stem: padding 3, stride 2


def test_the_target_is_a_documented_constant():
    assert rl.TARGET_PCT == 70.0 and "70%" in REPORTS["roofline"].doc
