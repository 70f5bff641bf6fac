"""Start-up stays light (the import path and the command line load no pyarrow or numpy), and the
bucketed range joins return exactly the pairs a plain comparison of every pair finds."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from dlscope.analysis.core.intervals import overlaps_sql, points_in_sql


def _last_line(probe: str) -> str:
    """Run ``probe`` in a fresh interpreter (what it imports is the question); its last line."""
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_command_line_and_import_path_load_no_pyarrow_or_numpy():
    probe = (
        "import sys, dlscope.cli, dlscope.importers.run, dlscope.store.build; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'numpy', 'pandas', 'rich'}))"
    )
    assert _last_line(probe) == "[]"


def test_analysis_commands_run_without_pandas(tmp_path):
    """pyarrow would import pandas (0.6 s) on its first DataFrame check; the report command (its
    advice, replay and plots use pyarrow and numpy) runs and never loads it. A command that runs
    the user's program does not block it."""
    profile = Path(__file__).parent / "data" / "advice_truth" / "mlp_baseline_full.dlscope"
    probe = (
        "import sys; from dlscope.cli import main, COMMANDS; "
        f"sys.argv = ['dlscope', 'report', {str(profile)!r}, '-o', {str(tmp_path / 'r.html')!r}]; "
        "rc = main(); print(rc, 'pandas' in sys.modules, 'pyarrow' in sys.modules, "
        "[c.name for c in COMMANDS if not c.without_pandas])"
    )
    assert _last_line(probe) == "0 False True ['profile', 'ncu', 'try']"
    assert (tmp_path / "r.html").stat().st_size > 10_000


def test_the_summary_through_the_python_api_loads_no_pandas():
    """A library user's summary (the import benchmark's job) hands DuckDB numpy arrays, not
    pyarrow arrays built with pa.array(), which imports pandas (0.3 s) on its first call."""
    profile = Path(__file__).parent / "data" / "advice_truth" / "gpt_baseline_full.dlscope"
    probe = (
        "import sys; from dlscope.analysis import REPORTS; from dlscope.analysis.core.context import ProfileData; "
        "from dlscope.analysis.core.summary import summarize; "
        f"d = ProfileData.open({str(profile)!r}); s = summarize(d); "
        "[REPORTS[n].compute(d) for n in ('gpu_time_breakdown', 'cuda_gpu_kern_sum')]; "
        "print(s.steps.count > 0, 'pandas' in sys.modules)"
    )
    assert _last_line(probe) == "True False"


def _intervals(rng: random.Random, n: int, span: int) -> list[tuple[int, int, int]]:
    out = []
    for i in range(n):
        s = rng.randrange(span)
        length = rng.choice((0, 1, rng.randrange(span // 50 + 1), rng.randrange(span)))  # incl. zero-length, huge
        out.append((i, s, s + length))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_bucketed_range_joins_match_all_pairs(seed):
    rng = random.Random(seed)
    span = 10**9
    a = _intervals(rng, 300, span)
    b = _intervals(rng, 200, span)
    pts = [(i, rng.randrange(span)) for i in range(400)] + [(400 + k, s) for k, (_, s, _) in enumerate(a[:50])]
    con = duckdb.connect()
    con.execute("CREATE TABLE a (id INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO a VALUES (?, ?, ?)", a)
    con.execute("CREATE TABLE b (id INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO b VALUES (?, ?, ?)", b)
    con.execute("CREATE TABLE p (id INTEGER, ts_ns BIGINT)")
    con.executemany("INSERT INTO p VALUES (?, ?)", pts)
    got = sorted(con.execute(points_in_sql("SELECT * FROM p", "SELECT * FROM a", "p.id, i.id")).fetchall())
    want = sorted((pid, aid) for pid, t in pts for aid, s, e in a if s <= t < e)
    assert got == want and want
    got = sorted(con.execute(overlaps_sql("SELECT * FROM a", "SELECT * FROM b", "a.id, b.id")).fetchall())
    want = sorted((x, y) for x, s1, e1 in a for y, s2, e2 in b if s1 < e2 and e1 > s2)
    assert got == want and want
