"""Many profiles at once: `dlscope sql` over a folder or glob, and the same tables through Dask.

50 profiles are made from the real ResNet-50 H100 profile by perturbing its kernels in a known
way (each profile drops a different 2% of them, stretches durations by its own factor, and every
other one renames its most frequent kernel). The expected per-profile numbers are computed in
plain Python from the original rows; dlscope over the folder, dlscope over each profile and Dask's
local cluster must all give exactly them.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from dlscope.store.reader import attach, open_profile

from .conftest import assert_one_line_error, q

N_PROFILES = 50


def _variant(base: Path, out: Path, i: int, top_id: int, new_id: int) -> None:
    """Profile ``i``: a copy of ``base`` whose kernels are perturbed (see the module docstring)."""
    shutil.copytree(base, out)
    con = duckdb.connect()
    rename = f"CASE WHEN name_id = {top_id} THEN {new_id} ELSE name_id END" if i % 2 else "name_id"
    k = str(out / "kernels.parquet")
    con.execute(f"""CREATE TABLE k AS SELECT * REPLACE (
                        start_ns + (end_ns - start_ns) * {100 + i} // 100 AS end_ns,
                        CAST({rename} AS INTEGER) AS name_id)
                    FROM read_parquet('{base / "kernels.parquet"}')
                    WHERE (correlation_id + external_id) % 50 <> {i}""")
    con.execute(f"COPY k TO '{k}' (FORMAT parquet)")
    if i % 2:
        s = str(out / "strings.parquet")
        con.execute(f"""CREATE TABLE s AS SELECT * FROM read_parquet('{base / "strings.parquet"}') UNION ALL
                        SELECT {new_id}::INTEGER, value || ' #{i}' FROM read_parquet('{base / "strings.parquet"}')
                        WHERE id = {top_id}""")
        con.execute(f"COPY s TO '{s}' (FORMAT parquet)")
    con.close()


@pytest.fixture(scope="module")
def fleet(resnet_profile: Path, tmp_path_factory) -> tuple[Path, dict[str, Counter]]:
    """The folder of 50 profiles, and per profile: kernel name -> (count, total ns) in plain Python."""
    root = tmp_path_factory.mktemp("fleet") / "runs"
    root.mkdir()
    k = pq.read_table(resnet_profile / "kernels.parquet").to_pylist()
    names = dict(zip(*pq.read_table(resnet_profile / "strings.parquet", columns=["id", "value"]).to_pydict().values()))
    top_id = Counter(r["name_id"] for r in k).most_common(1)[0][0]
    new_id = max(names) + 1
    expected: dict[str, dict[str, tuple[int, int]]] = {}
    for i in range(N_PROFILES):
        path = root / f"p{i:02d}.dlscope"
        _variant(resnet_profile, path, i, top_id, new_id)
        per: dict[str, list[int]] = {}
        for r in k:
            if (r["correlation_id"] + r["external_id"]) % 50 == i:
                continue
            name = names[r["name_id"]] + (f" #{i}" if i % 2 and r["name_id"] == top_id else "")
            acc = per.setdefault(name, [0, 0])
            acc[0] += 1
            acc[1] += (r["end_ns"] - r["start_ns"]) * (100 + i) // 100
        expected[str(path)] = {n: (c, t) for n, (c, t) in per.items()}
    return root, expected


QUERY = "select profile, name, count(*) as n, sum(end_ns - start_ns)::BIGINT as total from kernels group by all"


def _as_dict(rows) -> dict[str, dict[str, tuple[int, int]]]:
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for profile, name, n, total in rows:
        out.setdefault(profile, {})[name] = (int(n), int(total))
    return out


def test_sql_over_a_folder_matches_python_and_each_profile(cli, fleet):
    root, expected = fleet
    r = cli("sql", root, QUERY, "--format", "json")
    assert r.code == 0, r.err
    got = _as_dict((d["profile"], d["name"], d["n"], d["total"]) for d in json.loads(r.out))
    assert got == expected
    # the same numbers as dlscope over each profile alone
    for path, per in expected.items():
        con = attach(open_profile(path))
        alone = q(con, "select name, count(*), sum(end_ns - start_ns)::BIGINT from kernels group by all")
        assert {n: (c, t) for n, c, t in alone} == per
    # odd profiles renamed their top kernel: names are decoded with each profile's own strings
    assert sum(1 for per in got.values() for n in per if " #" in n) == N_PROFILES // 2


def test_sql_over_a_glob_and_the_profiles_table(cli, fleet):
    root, expected = fleet
    r = cli(
        "sql",
        str(root / "p1*.dlscope"),
        "select profile, count(*) as n from steps group by 1 order by 1",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    rows = json.loads(r.out)
    assert [d["profile"] for d in rows] == [str(root / f"p1{i}.dlscope") for i in range(10)]
    assert len({d["n"] for d in rows}) == 1 and rows[0]["n"] > 0
    r = cli("sql", root, "select count(*) as n from profiles", "--format", "json")
    assert json.loads(r.out) == [{"n": N_PROFILES}]


def test_dask_local_cluster_gives_the_same_numbers(fleet):
    pytest.importorskip("dask.dataframe", reason="dask[dataframe] is the 'fleet' extra")
    distributed = pytest.importorskip("distributed")
    from dlscope.application.fleet_dask import read_table

    root, expected = fleet
    # light on a 2-core machine: one worker, threads only
    with (
        distributed.LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as cluster,
        distributed.Client(cluster),
    ):
        k = read_table(str(root), "kernels")
        assert k.npartitions == N_PROFILES
        k = k.assign(dur=k.end_ns - k.start_ns)
        res = k.groupby(["profile", "name"]).dur.agg(["count", "sum"]).compute()
    got = _as_dict((p, n, c, s) for (p, n), (c, s) in zip(res.index, res.itertuples(index=False)))
    assert got == expected


def test_a_folder_without_profiles_is_one_line(cli, tmp_path, fleet):
    r = cli("sql", tmp_path, "select 1")
    assert r.code == 2
    assert_one_line_error(r.err)
    assert "no dlscope profile" in r.err
    r = cli("sql", str(tmp_path / "nothing*"), "select 1")
    assert r.code == 2
    assert_one_line_error(r.err)


def test_a_folder_of_profiles_written_before_an_optional_column_reads_whole(cli):
    """The advice suite's profiles: some predate ``ops.source_id`` (schema.OPTIONAL_COLUMNS). The folder's views
    read the files by name, so those rows hold NULL there; it failed with a BinderException before."""
    folder = Path(__file__).parent / "data" / "advice_truth"
    profiles = sorted(folder.glob("*.dlscope"))
    lacking = [p for p in profiles if "source_id" not in pq.read_schema(p / "ops.parquet").names]
    assert lacking  # the case the bug needs: a profile without the column
    r = cli(
        "sql", folder, "select count(*) as steps, count(distinct profile) as profiles from steps", "--format", "json"
    )
    assert r.code == 0, r.err
    got = json.loads(r.out)[0]
    assert got == {
        "steps": sum(pq.read_metadata(p / "steps.parquet").num_rows for p in profiles),
        "profiles": len(profiles),
    }


def test_profiles_written_before_an_optional_column_join_those_after(cli, tmp_path):
    # ops.input_values_id arrived after these advice-suite profiles were written: the fleet reads it
    # as NULL for them and as recorded for the newer one
    from .conftest import DATA

    old, new = DATA / "advice_truth" / "gpt_baseline_full.dlscope", DATA / "roofline" / "mm_probe_bf16.dlscope"
    for p in (old, new):
        shutil.copytree(p, tmp_path / "f" / p.name)
    r = cli(
        "sql",
        tmp_path / "f",
        "SELECT profile, count(input_values) AS v, count(*) AS n FROM ops GROUP BY 1 ORDER BY 1",
        "--format",
        "json",
    )
    assert r.code == 0, r.err
    got = {Path(x["profile"]).name: (x["v"], x["n"]) for x in json.loads(r.out)}
    n_old = q(duckdb.connect(), f"SELECT count(*) FROM '{old}/ops.parquet'")[0][0]
    n_new, v_new = q(duckdb.connect(), f"SELECT count(*), count(input_values_id) FROM '{new}/ops.parquet'")[0]
    assert got == {old.name: (0, n_old), new.name: (v_new, n_new)} and v_new > 0
    r = cli("sql", tmp_path / "f" / "gpt_*", "SELECT count(input_values) AS v FROM ops", "--format", "json")
    assert r.code == 0 and json.loads(r.out) == [{"v": 0}]  # no file of the fleet has the column
