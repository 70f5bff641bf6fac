"""The per-op performance model (analysis/models/op_cost.py): FLOPs and bytes from recorded shapes.

Two sides: hand computations (numel x itemsize, 2*M*N*K) on the text the PyTorch profiler writes,
and torch.utils.flop_counter on real modules and real aten ops, recorded by torch.profiler on the
CPU (meta tensors for the GPU attention ops, whose meta kernels run anywhere) and read back through
the same parser.
"""

from __future__ import annotations

import json

from dlscope.analysis.models.op_cost import Arg, OpCost, Unknown, op_cost, parse

from .conftest import require


def cost(name: str, shapes: list, types: list[str], values: list[str] | None = None) -> OpCost | Unknown:
    """The model's answer for the text Kineto would record (compact JSON, as the importer keeps it)."""
    dump = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    return op_cost(name, parse(dump(shapes), dump(types), dump(values) if values is not None else None))


def ok(c: OpCost | Unknown) -> OpCost:
    assert isinstance(c, OpCost), c
    return c


# ---- parsing -------------------------------------------------------------------------------------


def test_parse_reads_tensors_scalars_lists_and_none():
    args = parse(
        "[[8,512,768],[],[],[768],[]]", '["c10::BFloat16","Scalar","","float","ScalarList"]', '["","1","","","[0, 1]"]'
    )
    assert args == [
        Arg("tensor", (8, 512, 768), "bfloat16"),
        Arg("value", value="1"),
        Arg("none"),
        Arg("tensor", (768,), "float32"),
        Arg("value", value="[0, 1]"),
    ]
    # a 0-D tensor (a wrapped Python number) is a tensor of one element
    z = parse("[[]]", '["longint"]')
    assert z == [Arg("tensor", (), "int64")] and z[0].numel == 1 and z[0].nbytes == 8


def test_parse_tensor_lists_kineto_and_execution_trace():
    # Kineto: a short list's shapes, never its dtypes; a long one's nothing
    short, long_ = parse("[[[4,5],[6]],[]]", '["TensorList","TensorList"]')
    assert short.kind == "tensors" and short.shapes == ((4, 5), (6,)) and short.dtypes is None
    assert long_.kind == "tensors" and long_.shapes is None
    # an execution trace: shapes and dtypes per tensor
    (et,) = parse("[[[3],[2,2]]]", '["GenericList[Tensor(float),Tensor(c10::Half)]"]')
    assert et.shapes == ((3,), (2, 2)) and et.dtypes == ("float32", "float16")
    assert parse("not json", "[]") is None and parse(None, None) is None
    assert parse("[[1],[2]]", '["float"]') is None  # lengths differ


# ---- matrix products: 2*M*N*K, operands read and product written once ---------------------------


def test_gemm_family_by_hand():
    c = ok(cost("aten::mm", [[4096, 768], [768, 3072]], ["c10::BFloat16"] * 2))
    assert c.flops == 2 * 4096 * 3072 * 768
    assert c.bytes == (4096 * 768 + 768 * 3072 + 4096 * 3072) * 2
    assert (c.dtype, c.matrix, c.kind) == ("bfloat16", True, "gemm")
    c = ok(cost("aten::addmm", [[3072], [4096, 768], [768, 3072], [], []], ["float"] * 3 + ["Scalar"] * 2))
    assert c.flops == 2 * 4096 * 3072 * 768
    assert c.bytes == (3072 + 4096 * 768 + 768 * 3072 + 4096 * 3072) * 4
    c = ok(cost("aten::bmm", [[96, 512, 64], [96, 64, 512]], ["c10::Half"] * 2))
    assert c.flops == 2 * 96 * 512 * 512 * 64 and c.bytes == 96 * (512 * 64 * 2 + 512 * 512) * 2
    c = ok(
        cost("aten::baddbmm", [[96, 512, 512], [96, 512, 64], [96, 64, 512], [], []], ["float"] * 3 + ["Scalar"] * 2)
    )
    assert c.flops == 2 * 96 * 512 * 512 * 64 and c.bytes == 96 * (512 * 512 * 2 + 512 * 64 * 2) * 4
    # linear: input [..., K], weight [N, K]
    c = ok(cost("aten::linear", [[8, 512, 768], [3072, 768], [3072]], ["float"] * 3))
    assert c.flops == 2 * 8 * 512 * 3072 * 768
    assert c.bytes == (8 * 512 * 768 + 3072 * 768 + 3072 + 8 * 512 * 3072) * 4
    # matmul broadcasts batches, and handles vectors
    c = ok(cost("aten::matmul", [[2, 1, 5, 7], [3, 7, 4]], ["float"] * 2))
    assert c.flops == 2 * 6 * 5 * 4 * 7 and c.detail.endswith("batch=6")
    assert ok(cost("aten::matmul", [[7], [7]], ["float"] * 2)).flops == 14
    assert ok(cost("aten::matmul", [[5, 7], [7]], ["float"] * 2)).flops == 70
    assert isinstance(cost("aten::mm", [[4, 5], [6, 7]], ["float"] * 2), Unknown)


def test_fp8_scaled_mm_reads_its_output_dtype():
    shapes, types = (
        [[64, 128], [128, 32], [], [], [], [], [], []],
        ["c10::Float8_e4m3fn"] * 2
        + ["float"] * 2
        + [
            "",
            "",
            "Scalar",
            "Scalar",
        ],
    )
    c = ok(cost("aten::_scaled_mm", shapes, types, ["", "", "", "", "", "", "15", "False"]))
    assert c.dtype == "float8_e4m3fn" and c.flops == 2 * 64 * 32 * 128
    assert c.bytes == 64 * 128 + 128 * 32 + 4 + 4 + 64 * 32 * 2  # bf16 out (ScalarType 15)
    assert isinstance(cost("aten::_scaled_mm", shapes, types), Unknown)  # out_dtype's value not recorded


# ---- convolutions --------------------------------------------------------------------------------


def test_convolution_forward_from_stride_and_padding():
    # ResNet-50's stem as cuDNN's op records it: (self, weight, padding, stride, dilation, groups, ...)
    c = ok(
        cost(
            "aten::cudnn_convolution",
            [[64, 3, 224, 224], [64, 3, 7, 7]] + [[]] * 7,
            ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
            ["", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False", "True"],
        )
    )
    out = 64 * 64 * 112 * 112
    assert c.flops == 2 * out * 3 * 7 * 7
    assert c.bytes == (64 * 3 * 224 * 224 + 64 * 3 * 7 * 7 + out) * 4
    assert "out=[64, 64, 112, 112]" in c.detail
    # the same without the argument values: unknown, never guessed
    u = cost(
        "aten::cudnn_convolution",
        [[64, 3, 224, 224], [64, 3, 7, 7]] + [[]] * 7,
        ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
    )
    assert isinstance(u, Unknown) and "not recorded" in u.reason


def test_convolution_backward_counts_the_gradients_asked_for():
    shapes = [[64, 64, 56, 56], [64, 64, 56, 56], [64, 64, 3, 3]] + [[]] * 8
    types = ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    fwd = 2 * 64 * 64 * 56 * 56 * 64 * 9
    vals = lambda mask: ["", "", "", "[0]", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1", mask]  # noqa: E731
    both = ok(cost("aten::convolution_backward", shapes, types, vals("[True, True, False]")))
    assert both.flops == 2 * fwd
    act = 64 * 64 * 56 * 56 * 4
    w = 64 * 64 * 9 * 4
    assert both.bytes == (act + w + act) + (act + act + w)  # grad_input pass, grad_weight pass
    first_layer = ok(cost("aten::convolution_backward", shapes, types, vals("[False, True, True]")))
    assert first_layer.flops == fwd and first_layer.bytes == (act + act + w) + (act + 64 * 4)


# ---- attention -----------------------------------------------------------------------------------


def test_attention_by_hand_and_causal_halves():
    q = [8, 12, 512, 64]
    types = ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]
    full = ok(
        cost(
            "aten::scaled_dot_product_attention",
            [q, q, q] + [[]] * 5,
            types,
            ["", "", "", "", "0.", "False", "", "False"],
        )
    )
    assert full.flops == 4 * 96 * 512 * 512 * 64
    assert full.bytes == 4 * 96 * 512 * 64 * 2  # q, k, v read; out written
    causal = ok(
        cost(
            "aten::scaled_dot_product_attention",
            [q, q, q] + [[]] * 5,
            types,
            ["", "", "", "", "0.", "True", "", "False"],
        )
    )
    assert causal.flops * 2 == full.flops and "causal" in causal.detail
    assert isinstance(cost("aten::scaled_dot_product_attention", [q, q, q] + [[]] * 5, types), Unknown)
    # (batch, seq, heads, dim): the memory-efficient kernel, causal from custom_mask_type
    s = [8, 512, 12, 64]
    eff = ok(
        cost(
            "aten::_efficient_attention_forward",
            [s, s, s] + [[]] * 11,
            ["float"] * 3 + [""] * 5 + ["Scalar"] * 3 + [""] * 3,
            ["", "", "", "", "", "", "", "", "0.", "1", "True", "", "", ""],
        )
    )
    assert eff.flops == full.flops // 2
    # grouped-query attention: the query's heads count; a longer key (s_k != s_q) keeps the masked share
    gqa = ok(
        cost(
            "aten::scaled_dot_product_attention",
            [[2, 8, 16, 32], [2, 2, 64, 32], [2, 2, 64, 32]] + [[]] * 5,
            types,
            ["", "", "", "", "0.", "False", "", "True"],
        )
    )
    assert gqa.flops == 4 * 16 * 16 * 64 * 32


def test_causal_share_with_different_lengths():
    from dlscope.analysis.models.op_cost import _causal_share

    # top-left causal, 2 queries over 4 keys: rows keep 1 and 2 keys
    assert _causal_share(2, 4, False) == 3 / 8
    # bottom-right: rows keep 3 and 4 keys
    assert _causal_share(2, 4, True) == 7 / 8
    assert _causal_share(512, 512, False) == 0.5
    # the closed form against counting the kept scores row by row
    for s_q in range(1, 9):
        for s_k in range(1, 9):
            for br in (False, True):
                off = s_k - s_q if br else 0
                kept = sum(max(0, min(s_k, i + 1 + off)) for i in range(s_q))
                assert s_q == s_k or _causal_share(s_q, s_k, br) == kept / (s_q * s_k)


def test_damaged_shapes_are_unknown_not_overflowing():
    huge = cost("aten::mm", [[2**40, 2**40], [2**40, 2**40]], ["float", "float"])
    assert isinstance(huge, Unknown) and "too large" in huge.reason
    zero = cost(
        "aten::cudnn_convolution",
        [[1, 3, 8, 8], [4, 3, 3, 3]] + [[]] * 7,
        ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
        ["", "", "[1, 1]", "[0, 0]", "[1, 1]", "1", "False", "False", "True"],
    )
    assert isinstance(zero, Unknown)  # stride 0


def test_variable_length_attention_is_unknown():
    u = cost(
        "aten::_efficient_attention_forward",
        [[1, 300, 12, 64]] * 3 + [[], [5], [5]] + [[]] * 8,
        ["float"] * 3 + ["", "int", "int"] + [""] * 2 + ["Scalar"] * 3 + [""] * 3,
        ["", "", "", "", "", "", "", "", "0.", "0", "True", "", "", ""],
    )
    assert isinstance(u, Unknown) and "variable-length" in u.reason


# ---- norms, softmax, embedding, elementwise, reductions, optimizer ------------------------------


def test_norms_softmax_embedding_by_hand():
    n = 8 * 512 * 768
    ln = ok(
        cost(
            "aten::native_layer_norm",
            [[8, 512, 768], [], [768], [768], []],
            ["float", "ScalarList", "float", "float", "Scalar"],
        )
    )
    assert ln.flops == 5 * n and ln.bytes == 2 * n * 4 + 2 * 768 * 4 + 2 * 4096 * 4 and not ln.matrix
    lnb = ok(
        cost(
            "aten::native_layer_norm_backward",
            [[8, 512, 768], [8, 512, 768], [], [8, 512, 1], [8, 512, 1], [768], [768], []],
            ["float"] * 2 + ["ScalarList"] + ["float"] * 4 + ["ScalarList"],
            ["", "", "[768]", "", "", "", "", "[True, True, True]"],
        )
    )
    assert lnb.bytes == (2 * n + 2 * 4096 + 768) * 4 + (n + 2 * 768) * 4
    sm = ok(cost("aten::_softmax", [[4096, 50304], [], []], ["c10::BFloat16", "Scalar", "Scalar"], ["", "-1", "True"]))
    assert sm.bytes == 4096 * 50304 * (2 + 4)  # bf16 in, fp32 out (half_to_float)
    smb = ok(
        cost(
            "aten::_softmax_backward_data",
            [[64, 10], [64, 10], [], []],
            ["float", "float", "Scalar", "Scalar"],
            ["", "", "1", "6"],
        )
    )
    assert smb.bytes == 3 * 640 * 4
    emb = ok(
        cost(
            "aten::embedding", [[50304, 768], [8, 512], [], [], []], ["float", "longint", "Scalar", "Scalar", "Scalar"]
        )
    )
    assert emb.flops == 0 and emb.bytes == 4096 * 8 + 2 * 4096 * 768 * 4
    embb = ok(
        cost(
            "aten::embedding_dense_backward",
            [[8, 512, 768], [8, 512], [], [], []],
            ["float", "longint", "Scalar", "Scalar", "Scalar"],
            ["", "", "50304", "-1", "False"],
        )
    )
    assert embb.bytes == n * 4 + 4096 * 8 + 50304 * 768 * 4
    bn = ok(
        cost(
            "aten::cudnn_batch_norm",
            [[64, 256, 14, 14], [256], [256], [256], [256], [], [], []],
            ["float"] * 5 + ["Scalar"] * 3,
            ["", "", "", "", "", "True", "0.1", "1e-05"],
        )
    )
    x = 64 * 256 * 14 * 14
    assert bn.flops == 5 * x and bn.bytes == 2 * x * 4 + 4 * 256 * 4 + 2 * 256 * 4


def test_elementwise_and_reductions_count_bytes():
    add = ok(cost("aten::add", [[8, 512, 768], [768], []], ["c10::BFloat16", "float", "Scalar"]))
    assert add.flops == 0 and add.bytes == 8 * 512 * 768 * 2 + 768 * 4 + 8 * 512 * 768 * 4  # promoted to fp32
    inplace = ok(cost("aten::mul_", [[768], []], ["float", "double"]))  # a wrapped 0-D double
    assert inplace.bytes == 768 * 4 + 8 + 768 * 4 and inplace.dtype == "float32"
    cmp = ok(cost("aten::eq", [[64], [64]], ["longint", "longint"]))
    assert cmp.bytes == 64 * 8 * 2 + 64 and cmp.dtype == "bool"
    cast = ok(cost("aten::copy_", [[4096, 50304], [4096, 50304], []], ["float", "c10::BFloat16", "Scalar"]))
    assert cast.bytes == 4096 * 50304 * (4 + 2) and cast.detail == "bfloat16->float32"
    assert ok(cost("aten::fill_", [[1000], []], ["float", "Scalar"])).bytes == 4000
    drop = ok(cost("aten::native_dropout", [[10, 10], [], []], ["float", "Scalar", "Scalar"]))
    assert drop.bytes == 400 + 400 + 100
    # reductions: over the recorded dims, or all of them
    s = ok(
        cost("aten::sum", [[4096, 768], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[0]", "False", ""])
    )
    assert s.bytes == (4096 * 768 + 768) * 4
    k = ok(
        cost(
            "aten::mean",
            [[64, 2048, 7, 7], [], [], []],
            ["float", "ScalarList", "Scalar", ""],
            ["", "[-1, -2]", "True", ""],
        )
    )
    assert k.bytes == (64 * 2048 * 49 + 64 * 2048) * 4
    assert ok(cost("aten::sum", [[10, 10], []], ["float", ""])).bytes == 404
    assert isinstance(cost("aten::sum", [[4096, 768], [], [], []], ["float", "ScalarList", "Scalar", ""]), Unknown)


def test_optimizer_kernels_need_recorded_lists():
    # an execution trace records every tensor of a list: the fused AdamW's traffic by hand
    shapes = [[[768, 768], [768]]] * 4 + [[]] + [[[], []]] + [[]] * 9
    lst = "GenericList[Tensor(float),Tensor(float)]"
    types = (
        [lst] * 4
        + ["GenericList[]", "GenericList[Tensor(float),Tensor(float)]"]
        + ["Double"] * 5
        + ["Bool"] * 2
        + ["None"] * 2
    )
    adam = ok(cost("aten::_fused_adamw_", shapes, types))
    n = 768 * 768 + 768
    assert adam.bytes == n * 4 * (4 + 3) and adam.flops == 16 * n
    fe = ok(cost("aten::_foreach_lerp_", [[[768, 768], [768]], [[768, 768], [768]], []], [lst, lst, "Double"]))
    assert fe.bytes == n * 4 * 3
    # Kineto gives no dtypes for lists and no shapes for long ones: unknown, with the reason
    assert "no dtypes" in cost("aten::_foreach_add_", [[[4], [5]], []], ["TensorList", "Scalar"]).reason
    assert "no shapes" in cost("aten::_fused_adamw_", [[]] * 15, ["TensorList"] * 6 + ["Scalar"] * 9).reason


def test_unknown_ops_say_why():
    assert cost("aten::cat", [[[8, 512, 768]] * 3, []], ["TensorList", "Scalar"]).reason == "no model for aten::cat"
    assert op_cost("aten::mm", None).reason == "input shapes not recorded"
    bad = cost(
        "aten::cudnn_convolution",
        [[1, 3, 8, 8], [4, 3, 3, 3]] + [[]] * 7,
        ["float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", "Scalar", "Scalar"],
        ["", "", "[x]", "[1, 1]", "[1, 1]", "1", "False", "False", "True"],
    )
    assert isinstance(bad, Unknown)


# ---- against torch.utils.flop_counter ------------------------------------------------------------


def _recorded(fn) -> list[tuple[str, OpCost | Unknown]]:
    """Run ``fn`` under torch.profiler (CPU, shapes recorded) and cost every op it recorded."""
    torch = require("torch", "torch is not installed")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    del torch
    out = []
    for e in events:
        if e.get("cat") != "cpu_op":
            continue
        a = e.get("args", {})

        def text(key: str, a: dict = a) -> str | None:
            return json.dumps(a[key], separators=(",", ":")).replace(" ", "") if key in a else None

        out.append(
            (e["name"], op_cost(e["name"], parse(text("Input Dims"), text("Input type"), text("Concrete Inputs"))))
        )
    return out


def _flop_counts(fn) -> dict[str, int]:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return {str(k).replace("aten.", "aten::"): v for k, v in fc.get_flop_counts().get("Global", {}).items()}


def _model_counts(fn, names: tuple[str, ...]) -> dict[str, int]:
    got: dict[str, int] = {}
    for name, c in _recorded(fn):
        if name in names:
            got[name] = got.get(name, 0) + ok(c).flops
    return got


def test_matmul_and_convolution_flops_equal_flop_counter_on_real_modules():
    torch = require("torch", "torch is not installed")
    nn = torch.nn
    torch.manual_seed(0)
    lin = nn.Linear(48, 40)
    conv = nn.Conv2d(6, 12, 3, stride=2, padding=1)
    wide = nn.Conv2d(12, 8, (1, 5), padding=(0, 2), dilation=(1, 2))
    convt = nn.ConvTranspose2d(6, 4, 3, stride=2, padding=1, output_padding=1)

    def step() -> None:
        x = torch.randn(5, 7, 48, requires_grad=True)
        im = torch.randn(2, 6, 17, 19, requires_grad=True)
        a, b = torch.randn(3, 8, 16, requires_grad=True), torch.randn(3, 16, 5)
        loss = lin(x).sum() + wide(conv(im)).sum() + convt(im).sum()
        loss = loss + torch.bmm(a, b).sum() + torch.matmul(a, torch.randn(16, 4)).sum()
        loss = loss + torch.baddbmm(torch.randn(3, 8, 5), a, b).sum()
        loss.backward()

    want = _flop_counts(step)
    names = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::convolution", "aten::convolution_backward")
    got = _model_counts(step, names)
    assert set(want) == set(names) and got == want


def test_grouped_convolution_weight_gradient_is_the_forward_count():
    # flop_counter counts a grouped convolution's weight gradient `groups` times over (it reads the
    # transposed input's channel count as the batch): our count is the forward's, as by hand
    torch = require("torch", "torch is not installed")
    conv = torch.nn.Conv2d(6, 12, 3, stride=2, padding=1, groups=3)

    def step() -> None:
        conv(torch.randn(2, 6, 17, 19, requires_grad=True)).sum().backward()

    fwd = 2 * 2 * 12 * 9 * 10 * 2 * 9  # batch * out channels * out pixels * in channels per group * kernel
    assert _flop_counts(step)["aten::convolution"] == fwd
    got = _model_counts(step, ("aten::convolution", "aten::convolution_backward"))
    assert got == {"aten::convolution": fwd, "aten::convolution_backward": 2 * fwd}
    assert _flop_counts(step)["aten::convolution_backward"] == fwd + 3 * fwd


def test_attention_flops_equal_flop_counter_and_causal_is_half():
    torch = require("torch", "torch is not installed")
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    A = torch.ops.aten
    q = torch.randn(2, 4, 64, 32, device="meta")
    qs = q.transpose(1, 2).contiguous()  # (batch, seq, heads, dim): the kernels' own layout

    def sdpa_level(causal: bool) -> dict:
        o, lse, seed, off = A._scaled_dot_product_efficient_attention(q, q, q, None, True, 0.0, causal)
        r = A._scaled_dot_product_flash_attention(q, q, q, 0.0, causal)
        c = A._scaled_dot_product_cudnn_attention(q, q, q, None, True, 0.0, causal)
        return {
            "aten::_scaled_dot_product_efficient_attention": lambda: A._scaled_dot_product_efficient_attention(
                q, q, q, None, True, 0.0, causal
            ),
            "aten::_scaled_dot_product_flash_attention": lambda: A._scaled_dot_product_flash_attention(
                q, q, q, 0.0, causal
            ),
            "aten::_scaled_dot_product_cudnn_attention": lambda: A._scaled_dot_product_cudnn_attention(
                q, q, q, None, True, 0.0, causal
            ),
            "aten::_scaled_dot_product_efficient_attention_backward": (
                lambda: A._scaled_dot_product_efficient_attention_backward(
                    o, q, q, q, None, o, lse, seed, off, 0.0, [True, True, True, False], causal
                )
            ),
            "aten::_scaled_dot_product_flash_attention_backward": (
                lambda: A._scaled_dot_product_flash_attention_backward(
                    r[0], q, q, q, r[0], r[1], r[2], r[3], r[4], r[5], 0.0, causal, r[6], r[7]
                )
            ),
            "aten::_scaled_dot_product_cudnn_attention_backward": (
                lambda: A._scaled_dot_product_cudnn_attention_backward(
                    c[0], q, q, q, c[0], c[1], c[6], c[7], None, c[2], c[3], c[4], c[5], 0.0, causal
                )
            ),
        }

    fwd = sdpa_flop_count(q.shape, q.shape, q.shape)
    bwd = sdpa_backward_flop_count(q.shape, q.shape, q.shape, q.shape)
    for causal in (False, True):
        for name, fn in sdpa_level(causal).items():
            want = _flop_counts(fn)[name]
            assert want == (bwd if "backward" in name else fwd), name  # flop_counter ignores the mask
            got = _model_counts(fn, (name,))[name]
            assert got == (want // 2 if causal else want), (name, causal)

    # the kernels' own ops take (batch, seq, heads, dim); flop_counter reads their dims as (batch,
    # heads, seq, dim), so we hold them to its count for the SDPA op that calls them
    fe = A._efficient_attention_forward(qs, qs, qs, None, None, None, None, None, 0.0, 0, True)
    ff = A._flash_attention_forward(qs, qs, qs, None, None, 64, 64, 0.0, False, False)
    kernels = {
        "aten::_efficient_attention_forward": (
            fwd,
            lambda: A._efficient_attention_forward(qs, qs, qs, None, None, None, None, None, 0.0, 1, True),
        ),
        "aten::_flash_attention_forward": (
            fwd,
            lambda: A._flash_attention_forward(qs, qs, qs, None, None, 64, 64, 0.0, True, False),
        ),
        "aten::_efficient_attention_backward": (
            bwd,
            lambda: A._efficient_attention_backward(
                fe[0], qs, qs, qs, None, fe[0], None, None, 64, 64, fe[1], 0.0, fe[2], fe[3], 1, False
            ),
        ),
        "aten::_flash_attention_backward": (
            bwd,
            lambda: A._flash_attention_backward(
                ff[0], qs, qs, qs, ff[0], ff[1], None, None, 64, 64, 0.0, True, ff[2], ff[3]
            ),
        ),
    }
    for name, (full, fn) in kernels.items():
        assert _model_counts(fn, (name,))[name] * 2 == full, name  # all called causal


def test_attention_on_a_real_module_on_the_cpu():
    # the CPU's SDPA kernel (not in flop_counter's registry) against its formulas on the same shapes
    torch = require("torch", "torch is not installed")
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True)
    x = torch.randn(3, 40, 64, requires_grad=True)

    def step() -> None:
        mha(x, x, x, need_weights=False)[0].sum().backward()

    shape = (3, 4, 40, 16)
    for name, full in (
        ("aten::_scaled_dot_product_flash_attention_for_cpu", sdpa_flop_count(shape, shape, shape)),
        (
            "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
            sdpa_backward_flop_count(shape, shape, shape, shape),
        ),
    ):
        got = _model_counts(step, (name,))
        assert got == {name: full}, name
    # the projections around it: nn.MultiheadAttention's in- and out-projection GEMMs, as flop_counter counts
    want = _flop_counts(step)
    got = _model_counts(step, ("aten::mm", "aten::addmm"))
    assert got == {k: v for k, v in want.items() if k in ("aten::mm", "aten::addmm")} and got


def test_batch_norm_in_training_reads_its_inputs_twice():
    """Measured on an H200 (bench/roofline_vs_ncu.py, ResNet-50 step in fp32): cuDNN's batch-norm backward read
    2 x (input + grad) from DRAM for every shape; PyTorch's own kernels take two passes both ways
    (Normalization.cuh: collect statistics, then transform; reduce, then elementwise)."""
    x = 64 * 256 * 44 * 44
    c = 256
    bwd = ok(
        cost(
            "aten::cudnn_batch_norm_backward",
            [[64, 256, 44, 44], [64, 256, 44, 44], [c], [c], [c], [c], [c], [], []],
            ["float"] * 7 + ["Scalar", ""],
        )
    )
    assert bwd.bytes == 2 * (2 * x * 4) + 3 * c * 4 + x * 4 + 2 * c * 4

    def native(training: str) -> int:
        shapes = [[64, 256, 44, 44], [c], [c], [c], [c], [], [], []]
        values = ["", "", "", "", "", training, "0.1", "1e-05"]
        return ok(cost("aten::native_batch_norm", shapes, ["float"] * 5 + ["Scalar"] * 3, values)).bytes

    assert native("True") == 3 * x * 4 + 4 * c * 4 + 2 * c * 4  # read twice, the saved statistics written
    assert native("False") == 2 * x * 4 + 4 * c * 4

    def backward(train: str) -> int:
        shapes = [[64, 256, 44, 44], [64, 256, 44, 44], [c], [c], [c], [c], [c], [], [], []]
        values = [""] * 7 + [train, "1e-05", "[True, True, True]"]
        return ok(cost("aten::native_batch_norm_backward", shapes, ["float"] * 7 + ["Scalar"] * 3, values)).bytes

    assert backward("True") - backward("False") == 2 * x * 4  # the second read of input and grad
