"""Which kernels do the matrix math of a model (GEMMs, convolutions, attention), and in which
precision: judged from names, like :mod:`.tensor_cores` (which decides tensor-core use).

The advice on tensor cores and mixed precision needs both: a GEMM on CUDA cores in fp32 could run
on tensor cores in TF32; a TF32 or fp32 GEMM could run in bf16/fp16. Helper kernels launched by
the same ops (layout transposes, split-K reductions, softmax statistics) are not matrix math and
would not get faster, so they are left out here.

:func:`precision_sql` gives each kernel one class:

* ``low``: tensor-core math in 16 bits or fewer (bf16, fp16, fp8, int8);
* ``fp32_tc``: tensor-core (matrix-core) math on fp32 data: TF32, 3xTF32, AMD's fp32 MFMA;
* ``fp32``: fp32 math on CUDA cores (SIMT sgemm, ``*_ffma`` xmma kernels, cuDNN's fp32 engines);
* ``fp64``: double precision (never a candidate for TF32 or autocast);
* ``tc_unknown``: a tensor-core kernel whose name does not say its data type (cuBLASLt's
  ``nvjet_*`` on Hopper name a type letter that is not documented);
* NULL: not matrix math.

Patterns are case-insensitive regular expressions in the subset that Python's ``re`` and
DuckDB's RE2 share, each with an example name; ``tests/test_math_kernels.py`` checks every
example. Add a pattern with its example when a new library names its kernels differently.
"""

from __future__ import annotations

import re

from .tensor_core_kernels import NON_TENSOR_CORE_RE, TENSOR_CORE_RE

# (pattern, example) -- never matrix math, checked first
NOT_MATH_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"fbgemm", "fbgemm::split_embedding_codegen_grad_indice_weights_cpu-dtype_Half"),  # embedding tables
    (r"gemv", "gemv2T_kernel_val"),  # matrix-vector: memory-bound
    (r"splitkreduce|split_k_reduce", "cublasLt::splitKreduce_kernel"),  # split-K epilogue
    (r"reduce_wgrad|nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw", "cudnn::cnn::reduce_wgrad_nchw_helper"),
    (r"compute_dot_do_o|convert_dq|softmax", "cudnn::fusion::compute_dot_do_o_specialized"),  # attention helpers
    (r"init_device_workspace", "cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel"),
)
# (pattern, example) -- matrix math
MATH_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"gemm", "volta_sgemm_128x64_nn"),  # cuBLAS, CUTLASS, xmma GEMMs
    (r"conv|fprop|dgrad|wgrad|winograd", "void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>"),
    (r"nvjet", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),  # cuBLASLt on Hopper and later
    (
        r"fmha|flash_fwd|flash_bwd|flash::|flashattn|flash_attn|sdpa|memeffattention",
        "fmha_cutlassF_f32_aligned_64x64_rf_sm80",
    ),
    (r"^cijk_", "Cijk_Ailk_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN"),  # AMD Tensile GEMMs
)
# (pattern, example) -- data types in the name
FP64_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"dgemm|zgemm|double|dmma|^cijk_\w*?_(d|dd|z|zz)b?_", "volta_dgemm_128x64_nn"),
)
LOW_PRECISION_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        r"bf16|bfloat16|f16|fp16|half|e4m3|e5m2|fp8|i8i8|int8|imma|qmma",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1",
    ),
    (r"h884|h1688|h16816|h1616", "volta_h884gemm_64x64_ldg8_nn"),  # fp16 MMA shapes
    (r"flash_fwd|flash_bwd|flash::|flashattn|flash_attn", "flash_fwd_kernel"),  # FlashAttention: 16-bit only
    (r"^cijk_\w*?_(h|hh|hhs|hss|b|bb|bbs|bss|i8|4xi8)b?_", "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN"),
)
FP32_TENSOR_CORE_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"tf32|xf32", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1"),
    (
        r"tfloat32",
        "_ZN17cutlass__5x_cudnn6KernelINS_4conv6kernel23ImplicitGemmConvolution...OpClassTensorOp...10tfloat32_t",
    ),
    (r"s1688gemm|s16816gemm", "cutlass_80_tensorop_s1688gemm_128x128_32x3_tn_align4"),  # CUTLASS TF32
    (r"f32f32|_f32_|sgemm", "fmha_cutlassF_f32_aligned_64x64_rf_sm80"),  # fp32 data, tensor-core kernel
    (r"^cijk_\w*?_(s|ss|sb)_", "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN"),  # fp32 MFMA
)
PRECISIONS = ("low", "fp32_tc", "fp32", "fp64", "tc_unknown")


def _alternation(patterns: tuple[tuple[str, str], ...]) -> str:
    return "|".join(f"({p})" for p, _ in patterns)


NOT_MATH_RE = _alternation(NOT_MATH_PATTERNS)
MATH_RE = _alternation(MATH_PATTERNS)
FP64_RE = _alternation(FP64_PATTERNS)
LOW_PRECISION_RE = _alternation(LOW_PRECISION_PATTERNS)
FP32_TC_RE = _alternation(FP32_TENSOR_CORE_PATTERNS)


def _sql_str(s: str) -> str:
    return "'" + s.lower().replace("'", "''") + "'"


def precision_sql(name_col: str = "name") -> str:
    """SQL expression: the precision class of a kernel (see the module doc), NULL when the
    kernel is not matrix math."""
    n = f"lower(coalesce({name_col}, ''))"

    def m(rx: str) -> str:
        return f"regexp_matches({n}, {_sql_str(rx)})"

    tc = f"(NOT {m(NON_TENSOR_CORE_RE)} AND {m(TENSOR_CORE_RE)})"
    return (
        f"CASE WHEN {m(NOT_MATH_RE)} OR NOT {m(MATH_RE)} THEN NULL "
        f"WHEN {m(FP64_RE)} THEN 'fp64' "
        f"WHEN {m(LOW_PRECISION_RE)} THEN 'low' "
        f"WHEN NOT {tc} THEN 'fp32' "
        f"WHEN {m(FP32_TC_RE)} THEN 'fp32_tc' "
        "ELSE 'tc_unknown' END"
    )


_RX = {
    k: re.compile(v, re.IGNORECASE)
    for k, v in (
        ("not", NOT_MATH_RE),
        ("math", MATH_RE),
        ("fp64", FP64_RE),
        ("low", LOW_PRECISION_RE),
        ("fp32tc", FP32_TC_RE),
        ("nontc", NON_TENSOR_CORE_RE),
        ("tc", TENSOR_CORE_RE),
    )
}


def precision(name: str | None) -> str | None:
    """Python twin of :func:`precision_sql` (for tests and single names)."""
    if not name or _RX["not"].search(name) or not _RX["math"].search(name):
        return None
    if _RX["fp64"].search(name):
        return "fp64"
    if _RX["low"].search(name):
        return "low"
    if _RX["nontc"].search(name) or not _RX["tc"].search(name):
        return "fp32"
    return "fp32_tc" if _RX["fp32tc"].search(name) else "tc_unknown"
