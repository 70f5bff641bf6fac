"""Small formatting helpers for advice text: numbers the way an engineer writes them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def ms(v: float | None) -> str:
    """12.3 ms, 0.45 ms, 1,234 ms."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f} ms"
    if a >= 10:
        return f"{v:.1f} ms"
    if a >= 0.1:
        return f"{v:.2f} ms"
    return f"{v * 1000:.1f} us"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%" if abs(v) >= 10 else f"{v:.1f}%"


def count(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 or float(v).is_integer() else f"{v:.1f}"


def size(b: float) -> str:
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= f:
            return f"{b / f:.1f} {unit}"
    return f"{b:.0f} B"


def steps(numbers: Iterable[int | None]) -> str:
    """[2, 3, 4, 7] -> 'steps 2-4, 7'; [] -> ''."""
    nums = sorted({int(n) for n in numbers if n is not None})
    if not nums:
        return ""
    runs: list[list[int]] = []
    for x in nums:
        if runs and x == runs[-1][-1] + 1:
            runs[-1].append(x)
        else:
            runs.append([x])
    body = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return f"step{'s' if len(nums) > 1 else ''} {body}"


def short_kernel(name: str, width: int = 60) -> str:
    """A kernel name without its argument list and template noise, cut to ``width``."""
    n = name.replace("(anonymous namespace)::", "").replace("at::native::", "")
    if n.startswith("void "):
        n = n[5:]
    head, _, rest = n.partition("<")
    if head.split("::")[-1] in ("Kernel", "Kernel2", "device_kernel") and rest:
        n = rest  # CUTLASS wraps the kernel that matters in a template argument
    depth, out = 0, []
    for ch in n:  # drop template arguments and parameter lists: keep the outer name
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    s = "".join(out).strip() or n
    return s if len(s) <= width else s[: width - 3] + "..."


def plural(n: float, word: str) -> str:
    return f"{count(n)} {word}{'' if n == 1 else 's'}"


# ATen's generic elementwise/reduction kernels carry the real operation in a template argument.
_GENERIC_KERNELS = (
    "vectorized_elementwise_kernel",
    "elementwise_kernel",
    "unrolled_elementwise_kernel",
    "reduce_kernel",
    "index_elementwise_kernel",
)
_GENERIC_PARTS = {
    "BinaryFunctor",
    "UnaryFunctor",
    "BUnaryFunctor",
    "AUnaryFunctor",
    "gpu_kernel_impl",
    "gpu_kernel_impl_nocast",
    "func_wrapper_t",
    "ReduceOp",
    "Array",
    "array",
    "detail",
    "native",
    "at",
    "std",
    "char",
    "float",
    "int",
    "long",
    "bool",
    "void",
    "const",
    "operator",
    "lambda",
    "unsigned",
    "c10",
    "Half",
    "BFloat16",
    "double",
    "TensorIteratorBase",
    "TensorIterator",
    "anonymous",
    "namespace",
    "binary_internal",
    "OffsetCalculator",
    "LoadWithCast",
    "StoreWithCast",
    "Scalar",
}


def kernel_label(name: str, width: int = 60) -> str:
    """:func:`short_kernel`, with the operation of ATen's generic elementwise and reduction
    kernels: ``vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, ...>`` -> 'elementwise add'."""
    outer = short_kernel(name, width)
    if outer.split("::")[-1] not in _GENERIC_KERNELS:
        return outer
    import re

    for tok in re.findall(r"[A-Za-z_]\w*", name.split("<", 1)[-1]):
        if tok in _GENERIC_PARTS or tok.isdigit() or len(tok) < 3:
            continue
        op = re.sub(
            r"^(CUDAFunctor_|launch_)|(_kernel_cuda|_kernel_impl|_kernel|CUDAKernelImpl|Functor|_functor|Ops)$", "", tok
        )
        if op:
            kind = "reduce" if outer.endswith("reduce_kernel") else "elementwise"
            return f"{kind} {op}"[:width]
    return outer


def op_label(name: str | None) -> str | None:
    """An op name as people say it: autograd's wrapper 'autograd::engine::evaluate_function: X'
    becomes 'X (backward)'."""
    if name and name.startswith("autograd::engine::evaluate_function: "):
        return name.split(": ", 1)[1] + " (backward)"
    return name


def merge_rows(rows: list[dict[str, Any]], keys: tuple[str, ...], sums: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows that became equal on ``keys`` after labelling, merged: ``sums`` added, the first
    row's other values kept; ordered by the last of ``sums``, largest first."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        k = tuple(r.get(c) for c in keys)
        if k in out:
            for c in sums:
                out[k][c] = (out[k].get(c) or 0) + (r.get(c) or 0)
        else:
            out[k] = dict(r)
    return sorted(out.values(), key=lambda r: -(r.get(sums[-1]) or 0))
