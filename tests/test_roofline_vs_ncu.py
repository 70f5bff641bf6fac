"""The roofline's performance model against Nsight Compute's counters on real GPU data (issue 42).

``tests/data/roofline/{gpt,cnn}_strict_fp32.dlscope``: full-mode profiles of the suite's GPT (6 layers of 768)
and ResNet-50 training programs in fp32 with TF32 off, and ``ncu_{gpt,cnn}.csv.gz``: ncu's counters (FP32 add,
mul and FMA instructions, DRAM bytes) for every kernel of the same programs run bare under ncu, one step
of them; both recorded on an H200 on 2026-11-28 by ``bench/roofline_vs_ncu.py`` (bench/RESULTS.md). The
comparison (kernels aligned by name, each op's model FLOPs and bytes against ncu's sums over its kernels)
is the benchmark's own code, run here on the stored data: ncu is the independent measurement."""

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "roofline"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("roofline_vs_ncu", ROOT / "bench" / "roofline_vs_ncu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def compared() -> dict[str, dict[str, Any]]:
    b = _bench()
    out = {}
    for model in ("gpt", "cnn"):
        prof, _, info = b.step_kernels(DATA / f"{model}_strict_fp32.dlscope", 2)
        meas = b.read_window(DATA / f"ncu_{model}.csv.gz")
        out[model] = b.compare(prof, meas, b.align(prof, meas), info)
    return out


def test_the_kernels_align_with_ncus_launches(compared):
    """Every kernel of the GPT's step finds its ncu launch (same function name in order, same grid);
    the CNN's all but a few of cuDNN's (its bare run chose other helper kernels)."""
    assert compared["gpt"]["aligned"] == compared["gpt"]["step_kernels"] == 263
    assert compared["cnn"]["aligned"] >= 0.95 * compared["cnn"]["step_kernels"]


def test_matrix_products_flops_equal_ncus_ffma_count(compared):
    """The GEMMs (cuBLAS and CUTLASS SIMT kernels, FFMA) of both programs, and the CNN's forward
    convolutions (implicit GEMM): the model's 2*M*N*K within 1% (issue 42 asks for 10%)."""
    gemms = [r for m in ("gpt", "cnn") for r in compared[m]["ops"] if r["kind"] == "gemm"]
    fprop = [r for r in compared["cnn"]["ops"] if r["op"] == "aten::cudnn_convolution"]
    assert len(gemms) >= 15 and len(fprop) >= 10
    for r in gemms + fprop:
        assert abs(r["flop_ratio"] - 1) < 0.03, (r["op"], r["shapes"], r["flop_ratio"])


def test_where_the_count_differs_the_kernel_ran_other_arithmetic(compared):
    """Known and named in bench/RESULTS.md: PyTorch's memory-efficient attention backward in fp32 runs its
    products on the tensor cores (ncu's FP32 counters see a tenth of them), and cuDNN's Winograd weight
    gradient executes fewer multiplies than the direct convolution the model counts (as
    torch.utils.flop_counter does). Neither is within 10%; the test holds that this stays explained."""
    attention = [r for r in compared["gpt"]["ops"] if r["kind"] == "attention"]
    assert attention and all(r["flop_ratio"] < 0.2 for r in attention)
    s = compared["gpt"]["summary"]
    assert s["flop_ops_within_10pct"] == s["flop_ops"] - len(attention)


def test_memory_bound_ops_bytes_within_30pct_of_dram(compared):
    """The CNN's memory-bound ops among the owners of its 10 costliest kernels (cuDNN's batch-norm
    backward, which reads input and gradient twice, and the residual adds): DRAM bytes within 30% of the
    model's for 7 of 8, 98% of their time."""
    s = compared["cnn"]["summary"]
    assert s["memory_bound_ops"] == 8 and s["memory_bound_within_30pct"] >= 7
    bn = [r for r in compared["cnn"]["ops"] if r["op"] == "aten::cudnn_batch_norm_backward"]
    assert bn and all(abs(r["byte_ratio"] - 1) <= 0.30 for r in bn)
