"""What one framework op asks of the GPU: its floating-point operations and the bytes it moves,
from the input shapes, dtypes and argument values the profiler recorded.

Pure functions: :func:`parse` reads an op's recorded text (``ops.input_shapes``,
``input_types``, ``input_values``: PyTorch's "Input Dims", "Input type" and "Concrete Inputs",
or an execution trace's shapes and types) into :class:`Arg`; :func:`op_cost` returns an
:class:`OpCost` or, for what the model does not know, an :class:`Unknown` that says why. Nothing
is guessed: an op whose name has no model, whose shapes were not recorded (the PyTorch profiler
records none for tensor lists) or whose cost depends on an argument value that was not recorded
(a convolution's stride, attention's causal flag, which gradients a backward op computes) is
unknown.

Conventions:

* FLOPs count a multiply-add as two operations (the convention of vendors' peak figures and of
  ``torch.utils.flop_counter``). Matrix products, convolutions and attention follow
  ``torch.utils.flop_counter`` exactly, except that causal attention counts half
  (``flop_counter`` does not discount the mask; FlashAttention's benchmarks halve it).
* Bytes are the compulsory traffic: every input tensor read once from device memory and every
  output written once (a roofline's usual lower bound; a kernel that reads an operand twice, or
  data that stays in L2 between kernels, makes the measured traffic differ).
* Elementwise ops, copies, reductions and the optimizer's foreach kernels count bytes only
  (``flops`` 0): they are bound by memory. Norms and softmax count the few operations per
  element given with their formula, which keeps them memory-bound as they are.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Shape = tuple[int, ...]

# the profiler's dtype names (c10's type names, spaces removed; an execution trace wraps them in
# "Tensor(...)") -> numpy-style names
DTYPES: dict[str, str] = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "longint": "int64",
    "long": "int64",
    "int": "int32",
    "shortint": "int16",
    "short": "int16",
    "signedchar": "int8",
    "unsignedchar": "uint8",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
}
ITEMSIZE: dict[str, int] = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
    "complex32": 4,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
}
# c10::ScalarType by number, as a dtype argument's recorded value gives it (c10/core/ScalarType.h)
SCALAR_TYPES: dict[int, str] = {
    0: "uint8",
    1: "int8",
    2: "int16",
    3: "int32",
    4: "int64",
    5: "float16",
    6: "float32",
    7: "float64",
    8: "complex32",
    9: "complex64",
    10: "complex128",
    11: "bool",
    15: "bfloat16",
    23: "float8_e5m2",
    24: "float8_e4m3fn",
    25: "float8_e5m2fnuz",
    26: "float8_e4m3fnuz",
}
# type promotion order among floating types and integers (torch.result_type, simplified to one line:
# a floating type beats every integer type, a wider type a narrower one)
_RANK = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float8_e4m3fn": 5,
    "float8_e5m2": 5,
    "float8_e4m3fnuz": 5,
    "float8_e5m2fnuz": 5,
    "float16": 6,
    "bfloat16": 6,
    "float32": 7,
    "float64": 8,
    "complex32": 9,
    "complex64": 10,
    "complex128": 11,
}


@dataclass(frozen=True)
class Arg:
    """One recorded input. ``kind``: 'tensor' (``shape`` and ``dtype`` known), 'tensors' (a tensor
    list; ``shapes`` None when the profiler did not record them), 'none' (an absent optional
    tensor) or 'value' (a scalar, list, flag or string; ``value`` is its recorded text or None)."""

    kind: str
    shape: Shape | None = None
    dtype: str | None = None
    shapes: tuple[Shape, ...] | None = None
    dtypes: tuple[str, ...] | None = None
    value: str | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape or ())

    @property
    def nbytes(self) -> int:
        return _nbytes(self.shape or (), self.dtype)


@dataclass(frozen=True)
class OpCost:
    """Per call: ``flops`` (a multiply-add is 2), ``bytes`` (compulsory device-memory traffic).
    ``dtype``: the precision the work runs in, which picks the peak; ``matrix``: a matrix product
    (GEMM, convolution, attention) that matrix units can run; ``kind``: 'gemm', 'conv',
    'attention', 'norm', 'softmax', 'embedding', 'optimizer', 'elementwise', 'reduction';
    ``detail``: what the count used beyond the shapes (M, N, K; stride; causal); ``gemm``: a matrix
    product's (M, N, K, batch), which decide whether its kernels can use the tensor cores fully."""

    flops: int
    bytes: int
    dtype: str
    matrix: bool
    kind: str
    detail: str = ""
    gemm: tuple[int, int, int, int] | None = None


@dataclass(frozen=True)
class Unknown:
    """Why the model gives no cost for an op."""

    reason: str


class _Unknown(Exception):
    pass


def _nbytes(shape: Sequence[int], dtype: str | None) -> int:
    if dtype is None or dtype not in ITEMSIZE:
        raise _Unknown(f"dtype {dtype} has no known size")
    return math.prod(shape) * ITEMSIZE[dtype]


# ---- parsing ----------------------------------------------------------------------------------


def _dtype(text: str) -> str | None:
    t = text.replace(" ", "")
    m = re.fullmatch(r"Tensor\((.*)\)", t)  # execution trace
    return DTYPES.get(m.group(1) if m else t)


def _is_shape(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in x)


def parse(shapes: str | None, types: str | None, values: str | None = None) -> list[Arg] | None:
    """The inputs of one op from its recorded text; None when shapes or types were not recorded or
    cannot be read. ``values`` (PyTorch's Concrete Inputs) may be None: argument values are then
    unknown."""
    if shapes is None or types is None:
        return None
    try:
        dims, kinds = json.loads(shapes), json.loads(types)
        vals = json.loads(values) if values else None
    except (ValueError, TypeError):
        return None
    if not isinstance(dims, list) or not isinstance(kinds, list) or len(dims) != len(kinds):
        return None
    if not isinstance(vals, list) or len(vals) != len(dims):
        vals = None
    out: list[Arg] = []
    for i, (d, k) in enumerate(zip(dims, kinds)):
        v = vals[i] if vals is not None else None
        value = v if isinstance(v, str) and v != "" else None
        k = k if isinstance(k, str) else ""
        dt = _dtype(k)
        if dt is not None and _is_shape(d):
            out.append(Arg("tensor", tuple(d), dt))
        elif k.replace(" ", "") == "TensorList":  # Kineto: the shapes of a short list, never the dtypes
            recorded = isinstance(d, list) and d and all(_is_shape(s) for s in d)
            out.append(Arg("tensors", shapes=tuple(tuple(s) for s in d) if recorded else None))
        elif k.startswith("GenericList[") and "Tensor(" in k:  # execution trace: every tensor's shape
            inner = re.findall(r"Tensor\(([^)]*)\)", k)
            dts = tuple(_dtype(f"Tensor({x})") or "" for x in inner)
            if isinstance(d, list) and all(_is_shape(s) for s in d) and len(d) == len(dts) and all(dts):
                out.append(Arg("tensors", shapes=tuple(tuple(s) for s in d), dtypes=dts))
            else:
                out.append(Arg("tensors"))
        elif k == "" and d == [] and value is None:
            out.append(Arg("none"))
        else:
            out.append(Arg("value", value=value))
    return out


# ---- argument access ---------------------------------------------------------------------------


def _t(args: list[Arg], i: int, what: str = "") -> Arg:
    if i >= len(args) or args[i].kind != "tensor":
        raise _Unknown(f"input {i}{' (' + what + ')' if what else ''} is not a recorded tensor")
    return args[i]


def _opt_t(args: list[Arg], i: int) -> Arg | None:
    if i >= len(args) or args[i].kind != "tensor":
        return None
    return args[i]


def _parse_value(text: str) -> Any:
    t = text.strip()
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if t.startswith("[") and t.endswith("]"):
        inner = [x for x in t[1:-1].split(",") if x.strip() != ""]
        return [_parse_value(x) for x in inner]
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t.strip("'\"")


def _val(args: list[Arg], i: int, what: str) -> Any:
    if i >= len(args) or args[i].value is None:
        raise _Unknown(f"the value of {what} was not recorded")
    return _parse_value(args[i].value or "")


def _opt_val(args: list[Arg], i: int, default: Any) -> Any:
    """A value that may be absent: an input not passed (beyond the recorded ones) or None ("")."""
    if i >= len(args) or args[i].kind == "none":
        return default
    if args[i].value is None:
        raise _Unknown(f"the value of input {i} was not recorded")
    return _parse_value(args[i].value or "")


def _flag(args: list[Arg], i: int, what: str) -> bool:
    v = _val(args, i, what)
    if not isinstance(v, bool):
        raise _Unknown(f"{what} is not a boolean ({v!r})")
    return v


def _ints(v: Any, n: int, what: str) -> list[int]:
    """A list of ``n`` ints from a recorded value (an int, or a list of one int, repeated)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return [v] * n
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        if len(v) == n:
            return list(v)
        if len(v) == 1:
            return list(v) * n
    raise _Unknown(f"{what} {v!r} does not fit {n} spatial dimensions")


# ---- matrix products ---------------------------------------------------------------------------
# FLOPs: 2*M*N*K for an (M x K) by (K x N) product, per batch: torch.utils.flop_counter's mm_flop,
# bmm_flop, addmm_flop (the bias add, M*N, is not counted there or here). Bytes: both operands and
# the bias read once, the product written once.


def _gemm(
    m: int,
    n: int,
    k: int,
    batch: int,
    a: Arg,
    b: Arg,
    extra_bytes: int,
    out_dtype: str | None = None,
) -> OpCost:
    out = _nbytes((batch, m, n), out_dtype or a.dtype)
    dtype = a.dtype or ""
    detail = f"M={m} N={n} K={k}" + (f" batch={batch}" if batch != 1 else "")
    nbytes = a.nbytes + b.nbytes + extra_bytes + out
    return OpCost(2 * batch * m * n * k, nbytes, dtype, True, "gemm", detail, (m, n, k, batch))


def _2d(x: Arg, what: str) -> tuple[int, int]:
    s = x.shape or ()
    if len(s) != 2:
        raise _Unknown(f"{what} is {len(s)}-D, not a matrix")
    return s[0], s[1]


def _mm(args: list[Arg]) -> OpCost:
    a, b = _t(args, 0, "self"), _t(args, 1, "mat2")
    (m, k), (k2, n) = _2d(a, "self"), _2d(b, "mat2")
    if k != k2:
        raise _Unknown(f"shapes {a.shape} and {b.shape} do not multiply")
    return _gemm(m, n, k, 1, a, b, 0)


def _int_mm(args: list[Arg]) -> OpCost:
    a, b = _t(args, 0, "self"), _t(args, 1, "mat2")
    (m, k), (_, n) = _2d(a, "self"), _2d(b, "mat2")
    return _gemm(m, n, k, 1, a, b, 0, out_dtype="int32")


def _addmm(args: list[Arg]) -> OpCost:  # addmm(self, mat1, mat2, beta, alpha); _addmm_activation too
    bias = _opt_t(args, 0)
    a, b = _t(args, 1, "mat1"), _t(args, 2, "mat2")
    (m, k), (k2, n) = _2d(a, "mat1"), _2d(b, "mat2")
    if k != k2:
        raise _Unknown(f"shapes {a.shape} and {b.shape} do not multiply")
    return _gemm(m, n, k, 1, a, b, bias.nbytes if bias else 0)


def _3d(x: Arg, what: str) -> tuple[int, int, int]:
    s = x.shape or ()
    if len(s) != 3:
        raise _Unknown(f"{what} is {len(s)}-D, not a batch of matrices")
    return s[0], s[1], s[2]


def _bmm(args: list[Arg]) -> OpCost:
    a, b = _t(args, 0, "self"), _t(args, 1, "mat2")
    (bt, m, k), (_, k2, n) = _3d(a, "self"), _3d(b, "mat2")
    if k != k2:
        raise _Unknown(f"shapes {a.shape} and {b.shape} do not multiply")
    return _gemm(m, n, k, bt, a, b, 0)


def _baddbmm(args: list[Arg]) -> OpCost:  # baddbmm(self, batch1, batch2, beta, alpha)
    c = _opt_t(args, 0)
    a, b = _t(args, 1, "batch1"), _t(args, 2, "batch2")
    (bt, m, k), (_, k2, n) = _3d(a, "batch1"), _3d(b, "batch2")
    if k != k2:
        raise _Unknown(f"shapes {a.shape} and {b.shape} do not multiply")
    return _gemm(m, n, k, bt, a, b, c.nbytes if c else 0)


def _broadcast(*shapes: Sequence[int]) -> Shape:
    n = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise _Unknown(f"shapes {list(shapes)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _matmul(args: list[Arg]) -> OpCost:
    """torch.matmul's cases: vector dot, matrix-vector, matrix products with broadcast batches."""
    a, b = _t(args, 0, "self"), _t(args, 1, "other")
    sa, sb = a.shape or (), b.shape or ()
    if not sa or not sb:
        raise _Unknown("matmul of a 0-D tensor")
    m = 1 if len(sa) == 1 else sa[-2]
    k = sa[-1]
    n = 1 if len(sb) == 1 else sb[-1]
    k2 = sb[0] if len(sb) == 1 else sb[-2]
    if k != k2:
        raise _Unknown(f"shapes {sa} and {sb} do not multiply")
    batch = math.prod(_broadcast(sa[:-2], sb[:-2]))
    return _gemm(m, n, k, batch, a, b, 0)


def _linear(args: list[Arg]) -> OpCost:  # linear(input [..., K], weight [N, K], bias [N]?)
    x, w = _t(args, 0, "input"), _t(args, 1, "weight")
    bias = _opt_t(args, 2)
    sx, sw = x.shape or (), w.shape or ()
    if not sx or len(sw) not in (1, 2) or sx[-1] != sw[-1]:
        raise _Unknown(f"shapes {sx} and {sw} do not fit a linear layer")
    n = sw[0] if len(sw) == 2 else 1
    return _gemm(math.prod(sx[:-1]), n, sx[-1], 1, x, w, bias.nbytes if bias else 0)


def _scaled_mm(args: list[Arg]) -> OpCost:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum): fp8 GEMM
    a, b = _t(args, 0, "self"), _t(args, 1, "mat2")
    (m, k), (_, n) = _2d(a, "self"), _2d(b, "mat2")
    code = _opt_val(args, 6, None)
    if code is not None and (not isinstance(code, int) or code not in SCALAR_TYPES):
        raise _Unknown(f"out_dtype {code!r} is not a known dtype")
    extra = sum(x.nbytes for x in (_opt_t(args, 2), _opt_t(args, 3), _opt_t(args, 4)) if x is not None)
    return _gemm(m, n, k, 1, a, b, extra, out_dtype=SCALAR_TYPES[code] if code is not None else None)


# ---- convolutions ------------------------------------------------------------------------------
# FLOPs: torch.utils.flop_counter.conv_flop_count: 2 * batch * prod(output spatial) * prod(kernel)
# * weight[0] * weight[1] (the output's spatial size for a forward convolution, the input's for a
# transposed one; weight[1] is the input channels per group, so groups are counted). Backward
# (conv_backward_flop): the same count for the input gradient and again for the weight gradient,
# each when ``output_mask`` asks for it. Output size: torch.nn.Conv2d's and ConvTranspose2d's
# formulas. Bytes: input, weight, bias read; output written (per gradient for the backward).


def _conv_flops(x: Shape, w: Shape, out: Shape, transposed: bool) -> int:
    spatial = (x if transposed else out)[2:]
    return 2 * x[0] * math.prod(spatial) * math.prod(w[2:]) * w[0] * w[1]


def _conv_forward(
    x: Arg,
    w: Arg,
    bias: Arg | None,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int | None,
) -> OpCost:
    sx, sw = x.shape or (), w.shape or ()
    if len(sw) < 3:
        raise _Unknown(f"weight {sw} is not a convolution's")
    if len(sx) == len(sw) - 1:  # unbatched input
        sx = (1, *sx)
    if len(sx) != len(sw):
        raise _Unknown(f"input {sx} and weight {sw} do not fit")
    nsp = len(sw) - 2
    s = _ints(stride, nsp, "stride")
    d = _ints(dilation, nsp, "dilation")
    k = sw[2:]
    if isinstance(padding, str):
        if padding == "valid":
            p = [0] * nsp
        elif padding == "same":
            p = [(di * (ki - 1)) // 2 for di, ki in zip(d, k)]  # output = input size (stride 1)
        else:
            raise _Unknown(f"padding {padding!r}")
    else:
        p = _ints(padding, nsp, "padding")
    if transposed:
        op = _ints(output_padding, nsp, "output_padding")
        if groups is None:
            raise _Unknown("the groups of a transposed convolution were not recorded")
        cout = sw[1] * groups
        spatial = [
            (i - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 for i, si, pi, di, ki, oi in zip(sx[2:], s, p, d, k, op)
        ]
    else:
        cout = sw[0]
        if padding == "same":
            spatial = list(sx[2:])
        else:
            spatial = [(i + 2 * pi - di * (ki - 1) - 1) // si + 1 for i, si, pi, di, ki in zip(sx[2:], s, p, d, k)]
    if any(v <= 0 for v in spatial):
        raise _Unknown(f"the output size {spatial} is not positive")
    out = (sx[0], cout, *spatial)
    flops = _conv_flops(sx, sw, out, transposed)
    nbytes = x.nbytes + w.nbytes + (bias.nbytes if bias else 0) + _nbytes(out, x.dtype)
    detail = f"out={list(out)} stride={s} pad={p}" + (f" dilation={d}" if any(v != 1 for v in d) else "")
    return OpCost(flops, nbytes, x.dtype or "", True, "conv", detail + (" transposed" if transposed else ""))


def _conv_op(
    bias_at: int | None,
    stride_at: int,
    padding_at: int,
    dilation_at: int,
    groups_at: int | None,
    transposed_at: int | None = None,
    output_padding_at: int | None = None,
    transposed: bool = False,
) -> Callable[[list[Arg]], OpCost]:
    """A forward convolution op whose arguments sit at these positions."""

    def model(args: list[Arg]) -> OpCost:
        x, w = _t(args, 0, "input"), _t(args, 1, "weight")
        bias = _opt_t(args, bias_at) if bias_at is not None else None
        tr = _flag(args, transposed_at, "transposed") if transposed_at is not None else transposed
        groups = _val(args, groups_at, "groups") if groups_at is not None else None
        if groups is not None and not isinstance(groups, int):
            raise _Unknown(f"groups {groups!r}")
        op = _val(args, output_padding_at, "output_padding") if output_padding_at is not None and tr else 0
        return _conv_forward(
            x,
            w,
            bias,
            _val(args, stride_at, "stride"),
            _val(args, padding_at, "padding"),
            _val(args, dilation_at, "dilation"),
            tr,
            op,
            groups,
        )

    return model


def _conv_transpose(args: list[Arg]) -> OpCost:
    # conv_transpose{1,2,3}d(input, weight, bias, stride, padding, output_padding, groups, dilation)
    x, w = _t(args, 0, "input"), _t(args, 1, "weight")
    groups = _val(args, 6, "groups")
    if not isinstance(groups, int):
        raise _Unknown(f"groups {groups!r}")
    return _conv_forward(
        x,
        w,
        _opt_t(args, 2),
        _val(args, 3, "stride"),
        _val(args, 4, "padding"),
        _val(args, 7, "dilation"),
        True,
        _val(args, 5, "output_padding"),
        groups,
    )


def _depthwise(args: list[Arg]) -> OpCost:
    # _conv_depthwise2d(self, weight, kernel_size, bias, stride, padding, dilation)
    x, w = _t(args, 0, "self"), _t(args, 1, "weight")
    return _conv_forward(
        x,
        w,
        _opt_t(args, 3),
        _val(args, 4, "stride"),
        _val(args, 5, "padding"),
        _val(args, 6, "dilation"),
        False,
        0,
        None,
    )


def _conv_backward(args: list[Arg]) -> OpCost:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    #                      output_padding, groups, output_mask)
    g, x, w = _t(args, 0, "grad_output"), _t(args, 1, "input"), _t(args, 2, "weight")
    mask = _val(args, 10, "output_mask (which gradients it computes)")
    tr = _flag(args, 7, "transposed")
    if not (isinstance(mask, list) and len(mask) == 3 and all(isinstance(v, bool) for v in mask)):
        raise _Unknown(f"output_mask {mask!r}")
    sg, sx, sw = g.shape or (), x.shape or (), w.shape or ()
    if len(sg) != len(sx) or len(sw) != len(sx):
        raise _Unknown(f"shapes {sg}, {sx}, {sw} do not fit a convolution")
    # torch.utils.flop_counter.conv_backward_flop
    one = _conv_flops(sx, sw, sg, tr)
    flops = one * (int(mask[0]) + int(mask[1]))
    nbytes = 0
    if mask[0]:  # grad_input = conv(grad_output, weight)
        nbytes += g.nbytes + w.nbytes + x.nbytes
    if mask[1]:  # grad_weight = conv(input, grad_output)
        nbytes += g.nbytes + x.nbytes + w.nbytes
    if mask[2]:  # grad_bias = sum of grad_output
        nbytes += g.nbytes + _nbytes((sg[1],), g.dtype)
    parts = [n for n, on in zip(("input", "weight", "bias"), mask) if on]
    return OpCost(flops, nbytes, g.dtype or "", True, "conv", "grads: " + ",".join(parts))


# ---- attention ---------------------------------------------------------------------------------
# FLOPs: torch.utils.flop_counter.sdpa_flop_count (forward: Q @ K^T and P @ V, 2*b*h*s_q*s_k*(d_q +
# d_v)) and sdpa_backward_flop_count (the scores recomputed, then the gradients of both products:
# 2*b*h*s_q*s_k*(3*d_q + 2*d_v)), with b*h the query's batch and heads (grouped-query attention
# broadcasts the key's heads). Causal: the masked half is skipped, so half the count, as
# FlashAttention's benchmarks count it (benchmarks/benchmark_flash_attention.py, flops(..., causal));
# with s_q != s_k, the share of the s_q x s_k scores the mask keeps. Bytes: the tensors read once
# (query, key, value, mask; for the backward also the output, its gradient and the softmax
# statistics) and the output (the backward: the three gradients) written once.


def _causal_share(s_q: int, s_k: int, bottom_right: bool) -> float:
    if s_q == s_k:
        return 0.5
    # query row i keeps min(max(i + a, 0), s_k) keys, a = 1 (top left) or 1 + s_k - s_q (bottom
    # right), summed in closed form (a row loop would run as long as the sequence)
    a = 1 + (s_k - s_q if bottom_right else 0)
    lo = min(s_q, max(0, 1 - a))  # rows before lo keep none
    hi = min(s_q, max(lo, s_k - a))  # rows from hi on keep all s_k
    kept = (hi - lo) * a + (hi - 1 + lo) * (hi - lo) // 2 + (s_q - hi) * s_k
    return kept / (s_q * s_k)


def _attention(
    q: Arg,
    k: Arg,
    v: Arg,
    bh: int,
    s_q: int,
    s_k: int,
    d: int,
    d_v: int,
    causal: bool,
    backward: bool,
    bottom_right: bool,
    inputs: list[Arg],
) -> OpCost:
    per = 2 * bh * s_q * s_k
    flops = per * (3 * d + 2 * d_v) if backward else per * (d + d_v)
    share = _causal_share(s_q, s_k, bottom_right) if causal else 1.0
    flops = round(flops * share)
    read = sum(a.nbytes for a in inputs if a.kind == "tensor")
    if backward:
        written = q.nbytes + k.nbytes + v.nbytes
    else:
        written = _nbytes((bh * s_q * d_v,), q.dtype)
    detail = f"b*h={bh} s_q={s_q} s_k={s_k} d={d}" + (f" d_v={d_v}" if d_v != d else "") + (" causal" if causal else "")
    return OpCost(flops, read + written, q.dtype or "", True, "attention", detail)


def _bhsd(q: Arg, k: Arg, v: Arg) -> tuple[int, int, int, int, int]:
    """(b*h, s_q, s_k, d, d_v) of tensors laid out (..., seq, dim), as SDPA takes them."""
    sq, sk, sv = q.shape or (), k.shape or (), v.shape or ()
    if len(sq) < 2 or len(sk) < 2 or len(sv) < 2:
        raise _Unknown("attention inputs are not (..., seq, dim)")
    return math.prod(sq[:-2]), sq[-2], sk[-2], sq[-1], sv[-1]


def _bshd(q: Arg, k: Arg, v: Arg) -> tuple[int, int, int, int, int]:
    """The same for (batch, seq, heads, dim), the layout of _flash_attention_* and _efficient_attention_*."""
    sq, sk, sv = q.shape or (), k.shape or (), v.shape or ()
    if len(sq) != 4 or len(sk) != 4 or len(sv) != 4:
        raise _Unknown("attention inputs are not (batch, seq, heads, dim): a variable-length batch")
    return sq[0] * sq[2], sq[1], sk[1], sq[3], sv[3]


def _sdpa_op(
    causal_at: int, backward: bool, layout: str = "bhsd", qkv_at: int = 0, seqlens_at: tuple[int, ...] = ()
) -> Callable[[list[Arg]], OpCost]:
    def model(args: list[Arg]) -> OpCost:
        if any(_opt_t(args, i) is not None for i in seqlens_at):
            raise _Unknown("a variable-length batch: the sequence lengths are in a tensor's values")
        q, k, v = (_t(args, qkv_at + i, n) for i, n in enumerate(("query", "key", "value")))
        bh, s_q, s_k, d, d_v = (_bhsd if layout == "bhsd" else _bshd)(q, k, v)
        causal = _flag(args, causal_at, "is_causal")
        return _attention(q, k, v, bh, s_q, s_k, d, d_v, causal, backward, False, args)

    return model


def _efficient_op(mask_type_at: int, backward: bool, seqlens_at: tuple[int, int]) -> Callable[[list[Arg]], OpCost]:
    """_efficient_attention_forward/backward: causality is ``custom_mask_type`` (0 none, 1 causal
    from the top left, 2 causal from the bottom right)."""

    def model(args: list[Arg]) -> OpCost:
        if any(_opt_t(args, i) is not None for i in seqlens_at):
            raise _Unknown("a variable-length batch: the sequence lengths are in a tensor's values")
        off = 1 if backward else 0
        q, k, v = (_t(args, off + i, n) for i, n in enumerate(("query", "key", "value")))
        bh, s_q, s_k, d, d_v = _bshd(q, k, v)
        mt = _val(args, mask_type_at, "custom_mask_type (the causal mask)")
        if mt not in (0, 1, 2):
            raise _Unknown(f"custom_mask_type {mt!r}")
        return _attention(q, k, v, bh, s_q, s_k, d, d_v, mt != 0, backward, mt == 2, args)

    return model


# ---- norms, softmax, embedding -----------------------------------------------------------------
# FLOPs per element, as DeepSpeed's flops profiler counts them (deepspeed/profiling/flops_profiler/
# profiler.py): layer and group norm 5 with an affine weight, else 4 (_layer_norm_flops_compute);
# batch norm in training the same, in inference 2 with an affine weight, else 1
# (_batch_norm_flops_compute). RMS norm: 4 (square, sum, scale by the inverse root, weight), layer
# norm's count less the mean. Softmax: 5 (max, subtract, exp, sum, divide). A backward pass: twice
# its forward's count (it recomputes the normalized values and forms two reductions). Bytes: input
# read and output written once, the per-channel weights and statistics once, except where a batch
# norm's kernels read their inputs twice (below, :data:`_BN_TWO_PASS`).

# Batch norm in training reduces each channel over N x H x W, more than stays on chip, so its kernels
# read the inputs in two passes: PyTorch's own (aten/src/ATen/native/cuda/Normalization.cuh)
# batch_norm_collect_statistics_kernel then batch_norm_transform_input_kernel forward, and
# batch_norm_backward_reduce_kernel then batch_norm_backward_elemt_kernel backward; cuDNN's backward
# (bn_bw_1C11_kernel_new) the same: on an H200 its DRAM reads were 2 x (input + grad) for every shape
# of a ResNet-50 step (bench/roofline_vs_ncu.py, bench/RESULTS.md). cuDNN's forward in training reads once
# where its 'singleread' kernel takes the shape (measured: 1.04 x the one-pass bytes), so it keeps one.
_BN_TWO_PASS = 2

_ACC = {"float16": "float32", "bfloat16": "float32", "float32": "float32", "float64": "float64"}


def _stats_bytes(x: Arg, count: int) -> int:
    """``count`` per-row statistics (mean, rstd) in the accumulation type."""
    return _nbytes((count,), _ACC.get(x.dtype or "", "float32"))


def _norm_size(args: list[Arg], shape_at: int, weight_at: int) -> int:
    w = _opt_t(args, weight_at)
    if w is not None:
        return w.numel
    ns = _val(args, shape_at, "normalized_shape")
    return math.prod(_ints(ns, len(ns) if isinstance(ns, list) else 1, "normalized_shape"))


def _layer_norm(args: list[Arg]) -> OpCost:
    # native_layer_norm(input, normalized_shape, weight, bias, eps); layer_norm(..., cudnn_enable)
    x = _t(args, 0, "input")
    inner = _norm_size(args, 1, 2)
    rows = x.numel // max(inner, 1)
    w, b = _opt_t(args, 2), _opt_t(args, 3)
    nbytes = 2 * x.nbytes + sum(a.nbytes for a in (w, b) if a) + 2 * _stats_bytes(x, rows)
    return OpCost(x.numel * (5 if w else 4), nbytes, x.dtype or "", False, "norm", f"rows={rows} size={inner}")


def _layer_norm_backward(args: list[Arg]) -> OpCost:
    # native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    g, x = _t(args, 0, "grad_out"), _t(args, 1, "input")
    mask = _val(args, 7, "output_mask (which gradients it computes)")
    if not (isinstance(mask, list) and len(mask) == 3):
        raise _Unknown(f"output_mask {mask!r}")
    w = _opt_t(args, 5)
    read = g.nbytes + x.nbytes + sum(a.nbytes for a in (_opt_t(args, 3), _opt_t(args, 4), w) if a)
    inner = _norm_size(args, 2, 5)
    written = (x.nbytes if mask[0] else 0) + (int(bool(mask[1])) + int(bool(mask[2]))) * _nbytes((inner,), x.dtype)
    return OpCost(2 * x.numel * (5 if w else 4), read + written, x.dtype or "", False, "norm", f"size={inner}")


def _rms_norm(args: list[Arg]) -> OpCost:
    # rms_norm(input, normalized_shape, weight, eps); _fused_rms_norm (returns the rstd too)
    x = _t(args, 0, "input")
    inner = _norm_size(args, 1, 2)
    rows = x.numel // max(inner, 1)
    w = _opt_t(args, 2)
    nbytes = 2 * x.nbytes + (w.nbytes if w else 0) + _stats_bytes(x, rows)
    return OpCost(4 * x.numel, nbytes, x.dtype or "", False, "norm", f"rows={rows} size={inner}")


def _rms_norm_backward(args: list[Arg]) -> OpCost:
    # _fused_rms_norm_backward(grad_out, input, normalized_shape, rstd, weight, output_mask)
    g, x = _t(args, 0, "grad_out"), _t(args, 1, "input")
    mask = _val(args, 5, "output_mask (which gradients it computes)")
    if not (isinstance(mask, list) and len(mask) == 2):
        raise _Unknown(f"output_mask {mask!r}")
    w = _opt_t(args, 4)
    inner = _norm_size(args, 2, 4)
    read = g.nbytes + x.nbytes + sum(a.nbytes for a in (_opt_t(args, 3), w) if a)
    written = (x.nbytes if mask[0] else 0) + (_nbytes((inner,), x.dtype) if mask[1] else 0)
    return OpCost(8 * x.numel, read + written, x.dtype or "", False, "norm", f"size={inner}")


def _batch_norm(training_at: int, bias_at: int = 2, two_pass: bool = False) -> Callable[[list[Arg]], OpCost]:
    # native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
    # cudnn_batch_norm and miopen_batch_norm take the same first six
    def model(args: list[Arg]) -> OpCost:
        x = _t(args, 0, "input")
        training = _flag(args, training_at, "training")
        w = _opt_t(args, 1)
        per = (5 if w else 4) if training else (2 if w else 1)
        channels = (x.shape or (0, 0))[1] if len(x.shape or ()) > 1 else 1
        params = sum(a.nbytes for a in (w, _opt_t(args, bias_at), _opt_t(args, 3), _opt_t(args, 4)) if a)
        stats = 2 * _stats_bytes(x, channels) if training else 0  # the saved mean and inverse std
        reads = _BN_TWO_PASS if training and two_pass else 1
        return OpCost(
            per * x.numel,
            (reads + 1) * x.nbytes + params + stats,
            x.dtype or "",
            False,
            "norm",
            "training" if training else "inference",
        )

    return model


def _cudnn_batch_norm_backward(args: list[Arg]) -> OpCost:
    # cudnn_batch_norm_backward(input, grad_output, weight, running_mean, running_var, save_mean,
    #                           save_var, epsilon, reserveSpace)
    x, g = _t(args, 0, "input"), _t(args, 1, "grad_output")
    w = _opt_t(args, 2)
    read = _BN_TWO_PASS * (x.nbytes + g.nbytes) + sum(a.nbytes for a in (w, _opt_t(args, 5), _opt_t(args, 6)) if a)
    channels = (x.shape or (0, 0))[1]
    written = x.nbytes + 2 * _nbytes((channels,), w.dtype if w else x.dtype)
    return OpCost(2 * x.numel * (5 if w else 4), read + written, x.dtype or "", False, "norm", "")


def _native_batch_norm_backward(args: list[Arg]) -> OpCost:
    # native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
    #                            save_invstd, train, eps, output_mask)
    g, x = _t(args, 0, "grad_out"), _t(args, 1, "input")
    mask = _val(args, 9, "output_mask (which gradients it computes)")
    if not (isinstance(mask, list) and len(mask) == 3):
        raise _Unknown(f"output_mask {mask!r}")
    w = _opt_t(args, 2)
    try:
        passes = _BN_TWO_PASS if _flag(args, 7, "train") else 1
    except _Unknown:  # argument values not recorded: a backward pass is almost always training's
        passes = _BN_TWO_PASS
    read = passes * (g.nbytes + x.nbytes) + sum(a.nbytes for a in (w, _opt_t(args, 5), _opt_t(args, 6)) if a)
    channels = (x.shape or (0, 0))[1]
    written = (x.nbytes if mask[0] else 0) + (int(bool(mask[1])) + int(bool(mask[2]))) * _nbytes((channels,), x.dtype)
    return OpCost(2 * x.numel * (5 if w else 4), read + written, x.dtype or "", False, "norm", "")


def _group_norm(args: list[Arg]) -> OpCost:
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps)
    x = _t(args, 0, "input")
    w, b = _opt_t(args, 1), _opt_t(args, 2)
    groups = _val(args, 6, "group")
    n = (x.shape or (1,))[0]
    if not isinstance(groups, int):
        raise _Unknown(f"group {groups!r}")
    nbytes = 2 * x.nbytes + sum(a.nbytes for a in (w, b) if a) + 2 * _stats_bytes(x, n * groups)
    return OpCost(x.numel * (5 if w else 4), nbytes, x.dtype or "", False, "norm", f"groups={groups}")


def _softmax(args: list[Arg]) -> OpCost:
    # _softmax(self, dim, half_to_float) and _log_softmax: the output is fp32 when half_to_float
    x = _t(args, 0, "self")
    out_dtype = x.dtype
    if x.dtype in ("float16", "bfloat16") and _flag(args, 2, "half_to_float"):
        out_dtype = "float32"
    return OpCost(5 * x.numel, x.nbytes + _nbytes(x.shape or (), out_dtype), x.dtype or "", False, "softmax", "")


def _softmax_backward(args: list[Arg]) -> OpCost:
    # _softmax_backward_data(grad_output, output, dim, input_dtype), _log_softmax_backward_data
    g, y = _t(args, 0, "grad_output"), _t(args, 1, "output")
    code = _val(args, 3, "input_dtype")
    if code not in SCALAR_TYPES:
        raise _Unknown(f"input_dtype {code!r}")
    return OpCost(
        2 * 5 * g.numel,
        g.nbytes + y.nbytes + _nbytes(g.shape or (), SCALAR_TYPES[code]),
        g.dtype or "",
        False,
        "softmax",
        "",
    )


def _embedding(args: list[Arg]) -> OpCost:
    # embedding(weight [V, D], indices, padding_idx, scale_grad_by_freq, sparse): the indexed rows read
    # and written once, the indices read
    w, idx = _t(args, 0, "weight"), _t(args, 1, "indices")
    d = math.prod((w.shape or (0, 0))[1:])
    rows = idx.numel
    return OpCost(
        0, idx.nbytes + 2 * _nbytes((rows * d,), w.dtype), w.dtype or "", False, "embedding", f"rows={rows} dim={d}"
    )


def _index_select(args: list[Arg]) -> OpCost:
    # index_select(self, dim, index): the selected slices read and written once
    x, idx = _t(args, 0, "self"), _t(args, 2, "index")
    dim = _val(args, 1, "dim")
    s = list(x.shape or ())
    if not isinstance(dim, int) or not -len(s) <= dim < max(len(s), 1):
        raise _Unknown(f"dim {dim!r}")
    if s:
        s[dim] = idx.numel
    return OpCost(0, idx.nbytes + 2 * _nbytes(s, x.dtype), x.dtype or "", False, "embedding", f"dim={dim}")


def _embedding_backward(args: list[Arg]) -> OpCost:
    # embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
    # (embedding_backward: the same, then sparse): the gradient and indices read, the table's
    # gradient [num_weights, D] written
    g, idx = _t(args, 0, "grad_output"), _t(args, 1, "indices")
    v = _val(args, 2, "num_weights")
    if not isinstance(v, int):
        raise _Unknown(f"num_weights {v!r}")
    d = (g.shape or (0,))[-1]
    return OpCost(
        0, g.nbytes + idx.nbytes + _nbytes((v, d), g.dtype), g.dtype or "", False, "embedding", f"num_weights={v}"
    )


# ---- elementwise, copies, reductions -----------------------------------------------------------
# Bytes: every tensor input read once (a 0-D tensor is one element), the output (the broadcast of
# the inputs' shapes; for an in-place op, ``self``) written once. No FLOPs are counted: their time
# is the traffic's.

_UNARY = (
    "abs",
    "neg",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "silu",
    "mish",
    "hardswish",
    "hardsigmoid",
    "hardtanh",
    "elu",
    "leaky_relu",
    "softplus",
    "erf",
    "erfinv",
    "reciprocal",
    "sign",
    "sgn",
    "floor",
    "ceil",
    "round",
    "trunc",
    "frac",
    "clamp",
    "clamp_min",
    "clamp_max",
    "threshold",
    "bitwise_not",
    "logical_not",
    "nan_to_num",
    "square",
    "logit",
    "relu6",
    "celu",
    "selu",
)
_BINARY = (
    "add",
    "sub",
    "mul",
    "div",
    "rsub",
    "pow",
    "maximum",
    "minimum",
    "fmod",
    "remainder",
    "where",
    "masked_fill",
    "lerp",
    "addcmul",
    "addcdiv",
    "atan2",
    "hypot",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "copysign",
    "xlogy",
    "floor_divide",
    "true_divide",
    "fmax",
    "fmin",
)
_BOOL_OUT = (
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "isnan",
    "isinf",
    "isfinite",
    "logical_and",
    "logical_or",
    "logical_xor",
)
_BACKWARD = (
    "threshold_backward",
    "gelu_backward",
    "silu_backward",
    "sigmoid_backward",
    "tanh_backward",
    "hardswish_backward",
    "hardsigmoid_backward",
    "elu_backward",
    "leaky_relu_backward",
    "softplus_backward",
    "mish_backward",
    "hardtanh_backward",
    "native_dropout_backward",
)
_WRITE_ONLY = ("fill_", "zero_", "uniform_", "normal_", "bernoulli_", "random_", "exponential_")


def _promote(tensors: list[Arg]) -> str:
    """The result dtype: dimensioned tensors decide over 0-D ones (which are often wrapped Python
    numbers), then the highest in :data:`_RANK` (torch.result_type, in short)."""
    dimmed = [t for t in tensors if t.shape] or tensors
    return max((t.dtype or "" for t in dimmed), key=lambda d: _RANK.get(d, -1))


def _elementwise(name: str) -> Callable[[list[Arg]], OpCost]:
    base = name.rstrip("_")
    inplace = name.endswith("_")

    def model(args: list[Arg]) -> OpCost:
        tensors = [a for a in args if a.kind == "tensor"]
        if any(a.kind == "tensors" for a in args):
            raise _Unknown("a tensor-list input")
        if not tensors or args[0].kind != "tensor":
            raise _Unknown("self is not a recorded tensor")
        self_ = args[0]
        if name in _WRITE_ONLY:
            return OpCost(0, self_.nbytes, self_.dtype or "", False, "elementwise", "")
        if base == "copy":  # copy_(self, src): src read, self written (a cast when their dtypes differ)
            src = _t(args, 1, "src")
            return OpCost(
                0,
                src.nbytes + self_.nbytes,
                self_.dtype or "",
                False,
                "elementwise",
                f"{src.dtype}->{self_.dtype}" if src.dtype != self_.dtype else "",
            )
        read = sum(a.nbytes for a in tensors)
        if inplace:
            written = self_.nbytes
            dtype = self_.dtype or ""
        else:
            shape = _broadcast(*(a.shape or () for a in tensors))
            dtype = "bool" if base in _BOOL_OUT else _promote(tensors)
            written = _nbytes(shape, dtype)
            if base == "native_dropout":  # the output and its mask
                written += _nbytes(shape, "bool")
        return OpCost(0, read + written, dtype, False, "elementwise", "")

    return model


def _clone(args: list[Arg]) -> OpCost:
    x = _t(args, 0, "self")
    return OpCost(0, 2 * x.nbytes, x.dtype or "", False, "elementwise", "")


def _reduction(dim_at: int, keep_at: int, min_args: int) -> Callable[[list[Arg]], OpCost]:
    """sum, mean, amax, amin, prod, linalg_vector_norm over the dims a recorded value names (all of
    them in the overloads without a dim, given fewer than ``min_args`` inputs, or with dim None or
    []): the input read, the reduced output written."""

    def model(args: list[Arg]) -> OpCost:
        x = _t(args, 0, "self")
        s = list(x.shape or ())
        dims: Any = None if len(args) < min_args or args[dim_at].kind == "none" else _val(args, dim_at, "dim")
        if isinstance(dims, int) and not isinstance(dims, bool):
            dims = [dims]
        if dims is None or dims == []:
            dims = list(range(len(s)))
        if not isinstance(dims, list) or not all(isinstance(d, int) and -len(s) <= d < max(len(s), 1) for d in dims):
            raise _Unknown(f"dims {dims!r} of a {len(s)}-D tensor")
        keep = _flag(args, keep_at, "keepdim") if len(args) >= min_args else False
        cut = {d % len(s) for d in dims} if s else set()
        out = [1 if i in cut else n for i, n in enumerate(s)] if keep else [n for i, n in enumerate(s) if i not in cut]
        return OpCost(0, x.nbytes + _nbytes(out, x.dtype), x.dtype or "", False, "reduction", f"dims={sorted(cut)}")

    return model


# ---- optimizer ---------------------------------------------------------------------------------
# Tensor lists: the PyTorch profiler records no shapes for them (an execution trace does). Foreach
# ops: every list read once, the first list (in place) or a new one written once. Fused Adam(W)
# (torch.optim.adam/adamw with fused=True): per parameter element, param, grad, exp_avg,
# exp_avg_sq (and max_exp_avg_sq with amsgrad) read and all but the grad written; FLOPs: the 16
# arithmetic steps of torch.optim.adamw._single_tensor_adamw's update per element (weight decay 2,
# lerp 3, the second moment 4, the denominator 3, addcdiv 3, the bias corrections folded into
# scalars: 15, plus the grad scale 1). Fused SGD: param and grad (and the momentum buffer) read,
# param (and buffer) written; 2 FLOPs per element (4 with momentum).


def _lists(args: list[Arg]) -> list[Arg]:
    lists = [a for a in args if a.kind == "tensors"]
    if not lists:
        raise _Unknown("no tensor-list input")
    if any(a.shapes is None for a in lists):
        raise _Unknown("the profiler recorded no shapes for its tensor lists")
    if any(a.dtypes is None for a in lists):
        raise _Unknown("the profiler records no dtypes for tensor lists")
    return lists


def _list_bytes(a: Arg) -> int:
    return sum(_nbytes(s, d) for s, d in zip(a.shapes or (), a.dtypes or ()))


def _list_numel(a: Arg) -> int:
    return sum(math.prod(s) for s in a.shapes or ())


def _foreach(name: str) -> Callable[[list[Arg]], OpCost]:
    base = name.split("_foreach_", 1)[1]
    inplace = base.endswith("_")

    def model(args: list[Arg]) -> OpCost:
        lists = _lists(args)
        first = lists[0]
        dtype = (first.dtypes or ("",))[0]
        if base in ("zero_", "fill_"):
            return OpCost(0, _list_bytes(first), dtype, False, "optimizer", f"tensors={len(first.shapes or ())}")
        if base == "copy_":  # _foreach_copy_(self, src)
            return OpCost(0, sum(_list_bytes(a) for a in lists), dtype, False, "optimizer", "")
        read = sum(_list_bytes(a) for a in lists) + sum(a.nbytes for a in args if a.kind == "tensor")
        if base.startswith("norm"):
            written = _nbytes((len(first.shapes or ()),), _ACC.get(dtype, "float32"))
        else:
            written = _list_bytes(first)
        return OpCost(
            0,
            read + written,
            dtype,
            False,
            "optimizer",
            f"tensors={len(first.shapes or ())}" + ("" if inplace else " out-of-place"),
        )

    return model


def _fused_adam(args: list[Arg]) -> OpCost:
    # _fused_adam_/_fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr,
    #                            beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
    _lists(args)
    params, grads, m, v, vmax = (args[i] for i in range(5))
    amsgrad = bool(vmax.shapes)
    state = [params, m, v] + ([vmax] if amsgrad else [])
    read = sum(_list_bytes(a) for a in state) + _list_bytes(grads)
    written = sum(_list_bytes(a) for a in state)
    n = _list_numel(params)
    return OpCost(
        16 * n,
        read + written,
        (params.dtypes or ("",))[0],
        False,
        "optimizer",
        f"tensors={len(params.shapes or ())}" + (" amsgrad" if amsgrad else ""),
    )


def _fused_sgd(args: list[Arg]) -> OpCost:
    # _fused_sgd_(self, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov,
    #             maximize, is_first_step, grad_scale, found_inf)
    _lists(args)
    params, grads, bufs = args[0], args[1], args[2]
    has_buf = bool(bufs.shapes)
    read = _list_bytes(params) + _list_bytes(grads) + (_list_bytes(bufs) if has_buf else 0)
    written = _list_bytes(params) + (_list_bytes(bufs) if has_buf else 0)
    return OpCost(
        (4 if has_buf else 2) * _list_numel(params),
        read + written,
        (params.dtypes or ("",))[0],
        False,
        "optimizer",
        f"tensors={len(params.shapes or ())}",
    )


# ---- the registry ------------------------------------------------------------------------------

MODELS: dict[str, Callable[[list[Arg]], OpCost]] = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::_addmm_activation": _addmm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::matmul": _matmul,
    "aten::linear": _linear,
    "aten::_int_mm": _int_mm,
    "aten::_scaled_mm": _scaled_mm,
    # forward convolutions: (bias, stride, padding, dilation, groups[, transposed, output_padding]) positions
    "aten::conv1d": _conv_op(2, 3, 4, 5, 6),
    "aten::conv2d": _conv_op(2, 3, 4, 5, 6),
    "aten::conv3d": _conv_op(2, 3, 4, 5, 6),
    "aten::convolution": _conv_op(2, 3, 4, 5, 8, transposed_at=6, output_padding_at=7),
    "aten::_convolution": _conv_op(2, 3, 4, 5, 8, transposed_at=6, output_padding_at=7),
    "aten::cudnn_convolution": _conv_op(None, 3, 2, 4, 5),
    "aten::cudnn_convolution_transpose": _conv_op(None, 4, 2, 5, 6, output_padding_at=3, transposed=True),
    "aten::miopen_convolution": _conv_op(2, 4, 3, 5, 6),
    "aten::mkldnn_convolution": _conv_op(2, 4, 3, 5, 6),
    "aten::conv_transpose1d": _conv_transpose,
    "aten::conv_transpose2d": _conv_transpose,
    "aten::conv_transpose3d": _conv_transpose,
    "aten::_conv_depthwise2d": _depthwise,
    "aten::convolution_backward": _conv_backward,
    # attention: (is_causal position, backward); (batch, heads, seq, dim) unless said
    "aten::scaled_dot_product_attention": _sdpa_op(5, False),
    "aten::_scaled_dot_product_efficient_attention": _sdpa_op(6, False),
    "aten::_scaled_dot_product_flash_attention": _sdpa_op(4, False),
    "aten::_scaled_dot_product_cudnn_attention": _sdpa_op(6, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": _sdpa_op(4, False),
    "aten::_cudnn_attention_forward": _sdpa_op(10, False, seqlens_at=(4, 5)),
    "aten::_scaled_dot_product_efficient_attention_backward": _sdpa_op(11, True, qkv_at=1),
    "aten::_scaled_dot_product_flash_attention_backward": _sdpa_op(11, True, qkv_at=1),
    "aten::_scaled_dot_product_cudnn_attention_backward": _sdpa_op(14, True, qkv_at=1, seqlens_at=(9, 10)),
    "aten::_cudnn_attention_backward": _sdpa_op(14, True, qkv_at=1, seqlens_at=(9, 10)),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_op(7, True, qkv_at=1),
    "aten::_flash_attention_forward": _sdpa_op(8, False, "bshd"),  # a variable-length batch is 3-D
    "aten::_flash_attention_backward": _sdpa_op(11, True, "bshd", qkv_at=1),
    "aten::_efficient_attention_forward": _efficient_op(9, False, (4, 5)),
    "aten::_efficient_attention_backward": _efficient_op(14, True, (6, 7)),
    # norms, softmax, embedding
    "aten::native_layer_norm": _layer_norm,
    "aten::layer_norm": _layer_norm,
    "aten::native_layer_norm_backward": _layer_norm_backward,
    "aten::rms_norm": _rms_norm,
    "aten::_fused_rms_norm": _rms_norm,
    "aten::_fused_rms_norm_backward": _rms_norm_backward,
    "aten::native_batch_norm": _batch_norm(5, two_pass=True),
    "aten::cudnn_batch_norm": _batch_norm(5),
    "aten::miopen_batch_norm": _batch_norm(5),
    "aten::cudnn_batch_norm_backward": _cudnn_batch_norm_backward,
    "aten::native_batch_norm_backward": _native_batch_norm_backward,
    "aten::native_group_norm": _group_norm,
    "aten::_softmax": _softmax,
    "aten::_log_softmax": _softmax,
    "aten::_softmax_backward_data": _softmax_backward,
    "aten::_log_softmax_backward_data": _softmax_backward,
    "aten::embedding": _embedding,
    "aten::index_select": _index_select,
    "aten::embedding_dense_backward": _embedding_backward,
    "aten::embedding_backward": _embedding_backward,
    # optimizer
    "aten::_fused_adam_": _fused_adam,
    "aten::_fused_adamw_": _fused_adam,
    "aten::_fused_sgd_": _fused_sgd,
    # data movement
    "aten::clone": _clone,
    # reductions: sum.dim_IntList(self, dim, keepdim, dtype) and sum(self, dtype); amax(self, dim, keepdim);
    # prod.dim_int(self, dim, keepdim, dtype); linalg_vector_norm(self, ord, dim, keepdim, dtype)
    "aten::sum": _reduction(1, 2, 3),
    "aten::mean": _reduction(1, 2, 3),
    "aten::amax": _reduction(1, 2, 3),
    "aten::amin": _reduction(1, 2, 3),
    "aten::prod": _reduction(1, 2, 3),
    "aten::linalg_vector_norm": _reduction(2, 3, 4),
}
for _n in _UNARY + _BINARY + _BOOL_OUT + _BACKWARD + ("native_dropout",):
    MODELS.setdefault(f"aten::{_n}", _elementwise(_n))
    MODELS.setdefault(f"aten::{_n}_", _elementwise(_n + "_"))
for _n in _WRITE_ONLY + ("copy_",):
    MODELS[f"aten::{_n}"] = _elementwise(_n)


def has_model(name: str) -> bool:
    return name in MODELS or name.startswith("aten::_foreach_")


def op_cost(name: str, args: list[Arg] | None) -> OpCost | Unknown:
    """The cost of one call of ``name`` with ``args`` (:func:`parse`); :class:`Unknown` with the reason
    when the model has none."""
    model = MODELS.get(name)
    if model is None and name.startswith("aten::_foreach_"):
        model = _foreach(name)
    if model is None:
        return Unknown(f"no model for {name}")
    if args is None:
        return Unknown("input shapes not recorded")
    try:
        c = model(args)
    except _Unknown as e:
        return Unknown(str(e))
    except (ValueError, TypeError, IndexError, ZeroDivisionError, OverflowError) as e:  # damaged values
        return Unknown(f"the recorded inputs do not fit the model ({e.__class__.__name__})")
    if not (0 <= c.flops < 2**62 and 0 <= c.bytes < 2**62):  # damaged shapes; sums must stay in 64 bits
        return Unknown("the recorded shapes are too large to be real")
    return c
