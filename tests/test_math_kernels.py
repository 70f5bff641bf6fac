"""The matrix-math precision classes: every documented example, Python and SQL agreeing on every
kernel name of the fixtures and the corpus, and the classes of the GPT and ResNet fixtures."""

from __future__ import annotations

import pytest

from dlscope.analysis.core import math_kernels as mk

from .conftest import corpus_files
from .report_helpers import fixture_path, imported, open_fixture

EXPECTED = {  # example -> class, for every pattern list
    **{ex: None for _, ex in mk.NOT_MATH_PATTERNS},
    **{ex: "fp64" for _, ex in mk.FP64_PATTERNS},
    **{ex: "low" for _, ex in mk.LOW_PRECISION_PATTERNS},
    **{ex: "fp32_tc" for _, ex in mk.FP32_TENSOR_CORE_PATTERNS},
    "volta_sgemm_128x64_nn": "fp32",
    "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>": "fp32",
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": "tc_unknown",
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4": "fp32",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x256_8x4_nt_align1>(Params)": "fp32",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >(int)": None,
    "cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>": None,
}


@pytest.mark.parametrize("name", EXPECTED)
def test_documented_examples(name):
    assert mk.precision(name) == EXPECTED[name]


def _sql_matches_python(data) -> dict:
    rows = data.con.execute(f"SELECT name, {mk.precision_sql('name')} FROM kernels GROUP BY ALL").fetchall()
    for name, cls in rows:
        assert mk.precision(name) == cls, name
    return dict(rows)


def test_sql_and_python_agree_on_every_kernel_everywhere(tmp_path_factory):
    from dlscope.analysis.core.context import ProfileData

    paths = [fixture_path(n) for n in ("h100_resnet50_phases", "h100_gpt6_fp32", "h100_gpt6_bf16")] + corpus_files()
    for p in paths:
        _sql_matches_python(ProfileData.open(imported(p, tmp_path_factory)))


def test_the_gpt_pair_and_resnet(tmp_path_factory):
    def time_by_class(name):
        data = open_fixture(name, tmp_path_factory)
        return dict(
            data.con.execute(f"""SELECT {mk.precision_sql("name")}, sum(end_ns - start_ns) FROM kernels
                                          GROUP BY 1""").fetchall()
        )

    fp32, bf16, resnet = (time_by_class(n) for n in ("h100_gpt6_fp32", "h100_gpt6_bf16", "h100_resnet50_phases"))
    assert "low" not in fp32 and fp32["fp32"] > 4 * fp32["fp32_tc"]  # GEMMs on CUDA cores, attention in 3xTF32
    assert "fp32" not in bf16 and "fp32_tc" not in bf16  # all matrix math in bf16 (nvjet, cuDNN flash)
    assert resnet["fp32_tc"] > 50 * resnet["fp32"]  # convolutions in TF32
