"""The below_roofline rule's causes: which ops run inside PyTorch's unfused attention (read from the ops around
each launch, on a real profile with one op's name changed), and the cause named from a product's shape,
precision and kernels (checked by hand against NVIDIA's tensor-core alignment table)."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from dlscope.advice.below_roofline import cause
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.measures.roofline_gaps import OpGap
from dlscope.analysis.reports.roofline import SDPA_MATH, roofline
from dlscope.application.advise import advise

from .conftest import need_file
from .test_rule_cases import DATA, ODD_SHAPES, PROBE, PROBE_SHAPES, rewrite_strings


def _copy(tmp_path: Path, changes: dict[str, str]) -> Path:
    dst = tmp_path / "probe.dlscope"
    shutil.copytree(DATA / PROBE, dst, ignore=shutil.ignore_patterns(".cache"))
    rewrite_strings(DATA / PROBE, dst, changes)
    return dst


def _mm(path: Path):
    (mm,) = [o for o in roofline(ProfileData.open(path)).ops if o.op == "aten::mm"]
    return mm


def test_the_math_path_of_attention_is_read_from_the_ops_around_the_launch(tmp_path: Path) -> None:
    """The probe's ``a @ b`` is aten::matmul around aten::mm: with the outer op named as SDPA's math path, the
    product's row says it ran there; with its real name, not."""
    assert not _mm(DATA / PROBE).sdpa_math
    renamed = _copy(tmp_path, {"aten::matmul": SDPA_MATH})
    mm = _mm(renamed)
    assert mm.sdpa_math and mm.calls == 35 and mm.input_shapes == PROBE_SHAPES


def test_the_math_path_is_named_before_the_shape(tmp_path: Path) -> None:
    """With K = 1001 as well, the product is still named as attention without a fused kernel: the shape of a
    product inside the math path is the attention's, which a fused kernel would not run as a product at all."""
    path = _copy(tmp_path, {"aten::matmul": SDPA_MATH, PROBE_SHAPES: ODD_SHAPES})
    (f,) = [f for f in advise(ProfileData.open(path)).findings if f.id == "below_roofline"]
    row = f.evidence.rows[0]
    assert row["op"] == "aten::mm" and row["cause"].startswith("attention without a fused kernel")
    assert "scaled_dot_product_attention's math path" in f.advice and "Pad the matrix" not in f.advice


def _gap(kind: str, dtype: str, gemm: tuple[int, int, int, int] | None, tc: bool = True) -> OpGap:
    return OpGap("aten::x", None, dtype, kind, "", "", 1.0, 1.0, 10.0, 0.5, gemm, tc, False)


@pytest.mark.parametrize(
    "gap,want",
    [
        # 16-bit: multiples of 8; 8-bit: of 16; TF32: of 4 (NVIDIA's "Tensor Core Requirements")
        (_gap("gemm", "bfloat16", (4096, 50257, 768, 1)), "N=50257 not a multiple of 8 (bfloat16 on tensor cores)"),
        (_gap("gemm", "float16", (4096, 1001, 1001, 1)), "K=1001 and N=1001 not a multiple of 8"),
        (_gap("gemm", "float8_e4m3fn", (4096, 4096, 1000, 1)), "K=1000 not a multiple of 16"),
        (_gap("gemm", "float32", (4096, 4096, 1002, 1)), "K=1002 not a multiple of 4 (float32 on tensor cores)"),
        (_gap("gemm", "bfloat16", (4096, 4096, 1000, 1)), ""),  # 1000 = 8 * 125: aligned
        # fp32 without tensor-core kernels: the precision, whatever the shape
        (_gap("gemm", "float32", (4096, 4096, 1001, 1), tc=False), "fp32 matrix math on CUDA cores"),
        (_gap("conv", "float32", None, tc=False), "fp32 matrix math on CUDA cores"),
        (_gap("attention", "float32", None), "fp32 attention"),
        # 96 products of 64 x 64: each a part of one 128 x 128 tile
        (_gap("gemm", "bfloat16", (64, 64, 64, 96)), "tiny batched GEMMs (96 products of 64x64, K=64)"),
        (_gap("gemm", "bfloat16", (512, 512, 64, 96)), ""),
        (_gap("norm", "bfloat16", None), ""),
        (_gap("attention", "bfloat16", None), ""),
    ],
)
def test_the_cause_is_named_from_the_shape_and_the_kernels(gap: OpGap, want: str) -> None:
    got = cause(gap)
    assert got.startswith(want) if want else got == ""


# ---- the planted case, run on the H200 ---------------------------------------------------------------------

K1001 = DATA / "roofline" / "odd_linear_k1001.dlscope"
K1008 = DATA / "roofline" / "odd_linear_k1008.dlscope"


def _linear_forward(path: Path, k: int) -> tuple[int, int, float, float]:
    """Steps, calls, seconds and the roofline's seconds of the Linear's forward product (aten::addmm: bias [8192],
    input [8192, k], weight.T [k, 8192]) in the steps after warm-up, from the Parquet files: its kernels by
    external id, its FLOPs and bytes by hand, the H200's datasheet BF16 peak (989.5 TFLOP/s) and memory (4.8 TB/s)."""
    p = str(path)
    con = duckdb.connect()
    steps = con.execute(f"SELECT count(*) FROM '{p}/steps.parquet' WHERE NOT warmup").fetchall()[0][0]
    ((calls, ns),) = con.execute(f"""
        WITH s AS (SELECT id, value FROM '{p}/strings.parquet'),
             o AS (SELECT o.* FROM '{p}/ops.parquet' o JOIN s ON s.id = o.name_id WHERE s.value = 'aten::addmm')
        SELECT count(DISTINCT o.op_id), sum(k.end_ns - k.start_ns) FROM '{p}/kernels.parquet' k
        JOIN o ON o.rank = k.rank AND o.external_id = k.external_id
        WHERE k.step IN (SELECT step FROM '{p}/steps.parquet' WHERE NOT warmup)""").fetchall()
    flops = 2 * 8192 * 8192 * k
    nbytes = (8192 * k + k * 8192 + 8192 + 8192 * 8192) * 2
    return steps, calls, ns / 1e9, max(flops / 989.5e12, nbytes / 4.8e12) * calls


def test_the_planted_linear_with_k_1001_is_named_on_a_real_h200_run() -> None:
    """bench/programs/odd_linear.py on the H200: the bf16 Linear with K = 1001 ran at 11% of its roofline, its
    weight gradient (N = 1001) at 14%; the same program with K = 1008 at 68% and 80%. The rule names both
    products of K = 1001 by the dimension at fault; on the control it names no alignment."""
    need_file(K1001)
    need_file(K1008)
    steps, calls, secs, roof = _linear_forward(K1001, 1001)
    _, calls8, secs8, roof8 = _linear_forward(K1008, 1008)
    assert calls == calls8 == steps == 11  # 12 steps, the first one warm-up
    assert 100 * roof / secs < 20 and 100 * roof8 / secs8 > 60  # the alignment alone cost ~5x
    (f,) = [f for f in advise(ProfileData.open(K1001)).findings if f.id == "below_roofline"]
    rows = {r["op"]: r for r in f.evidence.rows}
    assert rows["aten::addmm"]["cause"] == "K=1001 not a multiple of 8 (bfloat16 on tensor cores)"
    assert rows["aten::addmm"]["peak_pct"] == pytest.approx(100 * roof / secs)
    assert rows["aten::addmm"]["saving_ms_per_step"] == pytest.approx((secs - roof / 0.7) / steps * 1e3)
    assert rows["aten::mm"]["cause"] == "N=1001 not a multiple of 8 (bfloat16 on tensor cores)"
    assert f.evidence.rows[0]["op"] == "aten::addmm" and "Pad the matrix products' K and N" in f.advice
    assert f.advice.count("Pad the matrix") == 1  # one advice for both products
    control = [f for f in advise(ProfileData.open(K1008)).findings if f.id == "below_roofline"]
    assert all(" not a multiple of " not in r["cause"] for f in control for r in f.evidence.rows)
