"""The per-name kernel classes (analysis/core/kernel_names.py) against the per-row SQL expressions
they replaced and the Python twins of the patterns, on real traces; and the launching-op table
against a join over every op."""

from __future__ import annotations

import re

import pytest

from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.kernel_category import kernel_category_sql
from dlscope.analysis.core.kernel_names import kernel_names, kernel_ops
from dlscope.analysis.core.math_kernels import precision, precision_sql
from dlscope.analysis.core.tensor_core_kernels import is_tensor_core_kernel, tensor_core_sql
from dlscope.vocabulary.collectives import COMMUNICATION_RE

from .report_helpers import fixture_path, imported

TRACES = ("h100_gpt6_bf16", "h100_gpt6_fp32", "h100_resnet50_phases")


@pytest.mark.parametrize("trace", TRACES)
def test_classes_per_name_equal_per_kernel_and_python(trace, tmp_path_factory):
    src = fixture_path(trace)
    if not src.exists():
        pytest.skip(f"{src} is not here")
    data = ProfileData.open(imported(src, tmp_path_factory))
    table = kernel_names(data)
    # every kernel finds its name's row, and the row says what the per-kernel expressions say
    per_kernel = data.con.execute(f"""
        SELECT count(*), count(*) FILTER (WHERE n.precision IS NOT DISTINCT FROM {precision_sql("k.name")}
                                            AND n.category = {kernel_category_sql("k.name")}
                                            AND n.tensor_core = {tensor_core_sql("k.name")})
        FROM kernels k JOIN {table} n ON n.name_id = k.name_id""").fetchall()[0]
    assert per_kernel[0] == data.count("kernels") > 0
    assert per_kernel[1] == per_kernel[0]
    rows = data.rows(f"SELECT name, precision, category, tensor_core FROM {table}")
    assert len(rows) == data.scalar("SELECT count(DISTINCT name_id) FROM kernels")
    comm = re.compile(COMMUNICATION_RE, re.IGNORECASE)
    for r in rows:
        assert r["precision"] == precision(r["name"])
        assert r["tensor_core"] == is_tensor_core_kernel(r["name"])
        if comm.search(r["name"] or ""):
            assert r["category"] == "communication"
    # matrix math was found on these traces (a class that is never set would not show here)
    assert any(r["precision"] for r in rows)


def test_launching_ops_equal_a_join_over_every_op(tmp_path_factory):
    src = fixture_path("h100_gpt6_bf16")
    if not src.exists():
        pytest.skip(f"{src} is not here")
    data = ProfileData.open(imported(src, tmp_path_factory))
    got = data.con.execute(
        f"""SELECT count(*), count(o.name) FROM kernels k
                               LEFT JOIN {kernel_ops(data)} o ON o.rank = k.rank AND o.external_id = k.external_id"""
    ).fetchall()[0]
    want = data.con.execute("""SELECT count(*), count(o.name) FROM kernels k
                               LEFT JOIN (SELECT rank, external_id, any_value(name) AS name FROM ops
                                          WHERE external_id IS NOT NULL GROUP BY ALL) o
                                 ON o.rank = k.rank AND o.external_id = k.external_id""").fetchall()[0]
    assert got == want
    assert got[1] > 0.5 * got[0]  # most kernels have their op
    # each external id has one op here, so the names agree row by row
    assert (
        data.scalar(f"""SELECT count(*) FROM kernels k JOIN {kernel_ops(data)} o
                           ON o.rank = k.rank AND o.external_id = k.external_id
                           JOIN ops x ON x.rank = k.rank AND x.external_id = k.external_id
                           WHERE x.name <> o.name""")
        == 0
    )
