"""A kernel's category (compute, communication, memory), from its name; :mod:`.kernel_names` judges
it once per distinct name, and :mod:`.gpu_work` gives every piece of GPU work its category.

Categories, by kernel name (case-insensitive regular expressions, DuckDB's RE2 dialect):

* ``communication``: collective and peer-to-peer kernels (NCCL/RCCL, as HTA's ``^nccl.*Kernel``,
  plus MSCCL, NVSHMEM and the custom all-reduce kernels of inference servers);
* ``memory``: copies and sets (the ``memcpy`` and ``memset`` tables), and kernels named like
  them (``Memcpy ...``, ``Memset ...``, ``dma...``, as some non-CUDA dialects record copies);
* ``compute``: every other kernel.
"""

from __future__ import annotations

from ...vocabulary.collectives import COMMUNICATION_RE

MEMORY_KERNEL_PATTERNS: tuple[str, ...] = (r"^(memcpy|memset|dma)",)

MEMORY_KERNEL_RE = "|".join(f"({p})" for p in MEMORY_KERNEL_PATTERNS)


def kernel_category_sql(name_col: str = "name") -> str:
    """SQL: the category of a kernel from its name."""
    n = f"lower(coalesce({name_col}, ''))"
    return (
        f"CASE WHEN regexp_matches({n}, '{COMMUNICATION_RE}') THEN 'communication' "
        f"WHEN regexp_matches({n}, '{MEMORY_KERNEL_RE}') THEN 'memory' ELSE 'compute' END"
    )
