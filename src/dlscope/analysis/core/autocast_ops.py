"""How much of the forward and backward passes' host work autocast would add: the share of their
dispatched operators that autocast casts inputs for.

Under ``torch.autocast`` each matrix multiply and convolution first casts its fp32 inputs (an
``aten::_to_copy`` per input, and its copy back in the backward pass): more operators for the host
to dispatch, each launching a kernel, in proportion to how many of the passes' operators are matrix
math. Counted at the operators that do the work (those without child operators, as PyTorch's
dispatcher reaches them) over the traced steps' forward and backward phases, leaving out the
metadata operators that launch nothing (views, transposes, ``detach``: :data:`METADATA_OPS`), whose
host cost is a fraction of a launching operator's.

Measured on four models that none of the advice suite's programs uses (``python
bench/autocast_host_cost.py --count-ops``: PyTorch's ``nn.TransformerEncoder``, an MLP, a CNN with
batch norm, a residual MLP with layer norm; every dispatched operator counted with and without
autocast): autocast added 1.52 to 2.07 casts per matrix-math operator (median 1.55), 49-65% more
launching operators to the passes (median 62%).
"""

from __future__ import annotations

from dataclasses import dataclass

from .context import ProfileData
from .host_classes import MODEL_RE
from .host_state import main_pid_sql

# Operators autocast runs in 16 bits (CUDA's lower-precision list: matmul, linear, convolutions,
# attention), at the level they are dispatched to the device
CASTABLE_RE = (
    r"^aten::(addmm|addmv|mm|bmm|baddbmm|addbmm|matmul_backward|_convolution|cudnn_convolution.*|"
    r"convolution_backward|miopen_convolution.*|mkldnn_convolution|_scaled_dot_product_.*attention.*|"
    r"_efficient_attention_.*|_flash_attention_.*|_scaled_mm)$"
)
# Operators that only describe a tensor anew and launch no kernel
METADATA_OPS = (
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "detach",
    "reshape",
    "_reshape_alias",
    "expand",
    "permute",
    "as_strided",
    "slice",
    "select",
    "squeeze",
    "unsqueeze",
    "alias",
    "empty",
    "empty_like",
    "empty_strided",
    "split",
    "split_with_sizes",
    "unbind",
    "chunk",
    "narrow",
    "lift_fresh",
    "contiguous",
    "flatten",
    "unflatten",
    "view_as",
    "expand_as",
    "result_type",
    "is_same_size",
)
METADATA_RE = rf"^aten::({'|'.join(METADATA_OPS)})$"
# Casts autocast adds per matrix-math operator: the median of the four models above
ADDED_PER_CASTABLE = 1.55
# The passes' host work under autocast when the profile does not show their operators: the median
# of the four models' launching operators with autocast over without (1.49, 1.59, 1.65, 1.65)
TYPICAL_HOST_FACTOR = 1.62


@dataclass(frozen=True)
class PassOps:
    """The traced forward and backward passes' launching operators (per traced step), and those
    of them that autocast casts inputs for."""

    ops: float
    castable: float

    @property
    def host_factor(self) -> float:
        """The passes' host work under autocast, as a factor on today's."""
        return 1.0 + ADDED_PER_CASTABLE * self.castable / self.ops if self.ops else TYPICAL_HOST_FACTOR


def pass_ops(data: ProfileData) -> PassOps | None:
    """The operators without children, metadata operators left out, in the forward and backward
    phases of the traced steps, or None when the profile has no such phases or operators."""
    if not (data.has("ops") and data.has("phases")):
        return None
    row = data.con.execute(f"""
        WITH mp AS ({main_pid_sql(data)}),
             isl AS (SELECT p.rank, p.start_ns, p.end_ns FROM phases p LEFT JOIN mp m USING (rank)
                     WHERE p.kind = 'range' AND (m.pid IS NULL OR p.pid IS NULL OR p.pid = m.pid)
                       AND regexp_matches(lower(p.name), '{MODEL_RE}')),
             leaf AS (SELECT o.rank, o.start_ns, o.name FROM ops o
                      WHERE NOT EXISTS (SELECT 1 FROM ops c WHERE c.rank = o.rank AND c.parent_id = o.op_id)
                        AND NOT regexp_matches(o.name, '{METADATA_RE}')),
             inside AS (SELECT DISTINCT l.rank, l.start_ns, l.name FROM leaf l
                        JOIN isl ON isl.rank = l.rank AND l.start_ns >= isl.start_ns AND l.start_ns < isl.end_ns)
        SELECT count(*), count(*) FILTER (WHERE regexp_matches(name, '{CASTABLE_RE}')),
               (SELECT count(*) FROM detail_steps)
        FROM inside""").fetchall()[0]  # not fetchone: DuckDB 2 keeps the result open and refuses the next query
    if not row[0]:
        return None
    steps = max(int(row[2] or 0), 1)
    return PassOps(row[0] / steps, row[1] / steps)
