"""What reports judge from a kernel's name, judged once per distinct name; and each kernel's
launching op, looked up once.

Names repeat: the 504k-event GPT profile has 34k kernels but a few hundred kernel names.
Matching the precision, category and tensor-core patterns (RE2 over names of a hundred
characters) on every kernel row cost a quarter of a second per query there, in half a dozen
queries of one report. :func:`kernel_names` classifies each distinct name once into a temp table
made on the first use per opened profile; queries join it on ``name_id``. Per-name flags a single
query needs (a rule's own patterns) are computed over this table too, not over the kernels.

:func:`kernel_ops` does the same for the op that launched each kernel (the ops sharing its
``external_id``): several rules ask, and each grouped every op of the profile to find out.
"""

from __future__ import annotations

from .context import ProfileData
from .kernel_category import kernel_category_sql
from .math_kernels import precision_sql
from .tensor_core_kernels import tensor_core_sql


def kernel_names(data: ProfileData) -> str:
    """Name of a temp table, one row per kernel name of the profile: ``name_id``, ``name``,
    ``precision`` (:func:`~.math_kernels.precision_sql`), ``category``
    (:func:`~.kernel_category.kernel_category_sql`), ``tensor_core`` (:func:`~.tensor_cores.tensor_core_sql`).
    Join it on ``name_id``: every kernel's id has its row."""

    def make() -> str:
        return f"""SELECT k.name_id, s.value AS name, {precision_sql("s.value")} AS precision,
                          {kernel_category_sql("s.value")} AS category, {tensor_core_sql("s.value")} AS tensor_core
                   FROM (SELECT DISTINCT name_id FROM raw_kernels) k LEFT JOIN strings s ON s.id = k.name_id"""

    return data.shared_table("kernel_names", make)


def kernel_ops(data: ProfileData) -> str:
    """Name of a temp table (``rank``, ``external_id``, ``name``): the name of an op with each
    external id that GPU work or a runtime call carries (the op that launched it). Needs the
    ``ops`` table."""
    # only the ids that GPU work and runtime calls carry: the joins never look up the others
    # (most ops launch nothing), and a table of every op would be ten times larger
    carriers = " UNION ALL ".join(
        f"SELECT rank, external_id FROM raw_{t}" for t in ("kernels", "memcpy", "memset", "api")
    )
    return data.shared_table(
        "kernel_ops",
        lambda: (
            f"""
        SELECT o.rank, o.external_id, any_value(o.name) AS name FROM ops o
        SEMI JOIN ({carriers}) k ON k.rank = o.rank AND k.external_id = o.external_id
        WHERE o.external_id IS NOT NULL GROUP BY ALL"""
        ),
    )


def kernel_op_join(data: ProfileData, alias: str = "k", op_alias: str = "o") -> str:
    """SQL: LEFT JOIN giving ``{op_alias}.name``, the op that launched each kernel of ``alias``
    (NULL when unknown or the profile has no ops)."""
    if not data.has("ops"):
        return f"LEFT JOIN (SELECT NULL::INTEGER AS rank, NULL::VARCHAR AS name) {op_alias} ON FALSE"
    return (
        f"LEFT JOIN {kernel_ops(data)} {op_alias} ON {op_alias}.rank = {alias}.rank "
        f"AND {op_alias}.external_id = {alias}.external_id"
    )
