"""Tensor-core judgement from kernel names, and the tensor_core report on the H100 fixtures:
gpt6_fp32's GEMMs run on CUDA cores (FFMA), gpt6_bf16's on tensor cores."""

from __future__ import annotations

import re

import duckdb
import pyarrow as pa
import pytest

from dlscope.analysis.core.tensor_core_kernels import (
    NON_TENSOR_CORE_PATTERNS,
    TENSOR_CORE_PATTERNS,
    eligible_op_sql,
    is_tensor_core_eligible_op,
    is_tensor_core_kernel,
    tensor_core_sql,
)
from dlscope.analysis.reports import tensor_core

from . import kineto_reference as ref
from .report_helpers import US, fixture_path, make_profile, open_fixture

TC = [
    "volta_h884gemm_64x64_ldg8_nn",
    "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn",
    "turing_h1688gemm_256x128_ldg8_tn",
    "ampere_fp16_s16816gemm_fp16_256x128_ldg8_f2f_stages_64x3_tn",
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nn",
    "sm75_xmma_gemm_i8i8_i32i32_..._imma",
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4>"
        "(cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4::Params)"
    ),
    "void cutlass_cudnn::Kernel<cutlass_tensorop_s1688wgrad_optimized_tf32_64x128_16x6_nhwc>(T1::Params)",
    "void cutlass::Kernel<cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x2_tn_align8>(...)",
    "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas",
    "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
    (
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>"
        " >(Flash_fwd_params)"
    ),
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)",
    "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<...>)",  # 3xTF32
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized",
    "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0",
]
NOT_TC = [
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    (
        "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>"
        "(cutlass_80_simt_sgemm_128x256_8x4_nt_align1::Params)"
    ),
    "ampere_sgemm_128x64_tn",
    "volta_sgemm_32x128_tt",
    "ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1",
    (
        "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float"
        " const*)"
    ),
    "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(...)",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm75(...)",
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>"
        " >(...)"
    ),
    "triton_poi_fused_add_cos_sin_0",
    "Memcpy HtoD (Pageable -> Device)",
    "",
    None,
]


@pytest.mark.parametrize("name", TC)
def test_tensor_core_kernels(name):
    assert is_tensor_core_kernel(name)


@pytest.mark.parametrize("name", NOT_TC)
def test_not_tensor_core_kernels(name):
    assert not is_tensor_core_kernel(name)


def test_sql_and_python_agree():
    names = [n for n in TC + NOT_TC]
    for f in ("h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16"):
        names += list(ref.kernel_totals(ref.load(fixture_path(f))))
    con = duckdb.connect()
    con.register("k", pa.table({"name": pa.array(names, pa.string())}))
    got = con.execute(f"SELECT {tensor_core_sql('name')} FROM k").fetchall()
    assert [g[0] for g in got] == [is_tensor_core_kernel(n) for n in names]
    ops = [
        "aten::mm",
        "aten::addmm",
        "aten::linear",
        "aten::convolution",
        "aten::cudnn_convolution",
        "aten::convolution_backward",
        "aten::_scaled_dot_product_flash_attention",
        "Conv2DBackpropFilter",
        "BatchMatMulV2",
        "aten::_conv_depthwise2d",
        "aten::add_",
        "aten::convert_element_type",
        "aten::copy_",
        "aten::native_layer_norm",
        "aten::mmap_thing",
        "aten::sum",
    ]
    con.register("o", pa.table({"name": ops}))
    got = [g[0] for g in con.execute(f"SELECT {eligible_op_sql('name')} FROM o").fetchall()]
    assert got == [is_tensor_core_eligible_op(n) for n in ops]
    assert got == [True] * 10 + [False] * 6


def test_every_pattern_matches_its_own_example():
    # the examples named in the pattern lists are the documentation: keep them true
    for pattern, example in TENSOR_CORE_PATTERNS:
        assert is_tensor_core_kernel(example) and re.search(pattern, example, re.IGNORECASE), pattern
    for pattern, example in NON_TENSOR_CORE_PATTERNS:
        assert not is_tensor_core_kernel(example) and re.search(pattern, example, re.IGNORECASE), pattern


def _gemm_kernels(name: str) -> dict[str, tuple[int, int]]:
    """GEMM kernels of a fixture (plain Python over the JSON)."""
    return {
        k: v
        for k, v in ref.kernel_totals(ref.load(fixture_path(name))).items()
        if any(s in k.lower() for s in ("gemm", "nvjet"))
    }


def test_fp32_gemms_are_not_tensor_core_and_bf16_gemms_are(tmp_path_factory):
    fp32, bf16 = _gemm_kernels("h100_gpt6_fp32"), _gemm_kernels("h100_gpt6_bf16")
    assert fp32 and bf16
    assert not any(is_tensor_core_kernel(n) for n in fp32)
    assert all(is_tensor_core_kernel(n) for n in bf16)
    for name, gemms, using in (("h100_gpt6_fp32", fp32, False), ("h100_gpt6_bf16", bf16, True)):
        rows = {r["op"]: r for r in tensor_core.compute(open_fixture(name, tmp_path_factory)).table.to_pylist()}
        for op in ("aten::mm", "aten::addmm"):
            assert rows[op]["eligible"] and rows[op]["using_tc"] is using
            assert rows[op]["tc_pct"] == (100.0 if using else 0.0)
        # every GEMM kernel's time is in the tc (bf16) or non-tc (fp32) column of some op
        gemm_ns = sum(d for _, d in gemms.values())
        col = "tc_gpu_ms" if using else "non_tc_gpu_ms"
        assert sum(r[col] for r in rows.values()) * 1e6 >= gemm_ns - 1


def test_report_totals_equal_the_json(tmp_path_factory):
    name = "h100_resnet50_phases"
    totals = ref.kernel_totals(ref.load(fixture_path(name)))
    r = tensor_core.compute(open_fixture(name, tmp_path_factory))
    rows = r.table.to_pylist()
    assert sum(x["kernels"] for x in rows) == sum(c for c, _ in totals.values())
    tc_ns = sum(d for n, (_, d) in totals.items() if is_tensor_core_kernel(n))
    all_ns = sum(d for _, d in totals.values())
    assert sum(x["tc_gpu_ms"] for x in rows) == pytest.approx(tc_ns / 1e6)
    assert sum(x["gpu_ms"] for x in rows) == pytest.approx(all_ns / 1e6)
    assert any(f"{100 * tc_ns / all_ns:.1f}% of all kernel time" in n for n in r.notes)
    # ResNet's convolutions run TF32 on tensor cores; its fp32 matmuls (TF32 off by default) do not
    by_op = {x["op"]: x for x in rows}
    assert by_op["aten::cudnn_convolution"]["using_tc"] and not by_op["aten::mm"]["using_tc"]


def test_gpm_tensor_activity_is_a_second_opinion(tmp_path):
    api = [dict(pid=1, tid=1, start_ns=0, end_ns=1 * US, name="cudaLaunchKernel", correlation_id=1, external_id=5)]
    ops = [dict(pid=1, tid=1, start_ns=0, end_ns=2 * US, name="aten::mm", op_id=0, external_id=5)]
    k = [
        dict(
            device=0,
            stream=7,
            start_ns=2 * US,
            end_ns=12 * US,
            name="triton_tem_fused_mm_0",
            correlation_id=1,
            external_id=5,
        )
    ]
    counters = [dict(device=0, ts_ns=t * US, metric="tensor_active", value=v) for t, v in ((0, 40.0), (5, 60.0))]
    data = make_profile(tmp_path, api=api, ops=ops, kernels=k, counters=counters)
    r = tensor_core.compute(data)
    row = r.table.to_pylist()[0]
    assert row["op"] == "aten::mm" and row["eligible"] and not row["using_tc"]
    assert any("GPM tensor activity" in n and "mean 50.0%" in n for n in r.notes)
    assert any("eligible ops that used no tensor-core kernel: aten::mm" in n for n in r.notes)
