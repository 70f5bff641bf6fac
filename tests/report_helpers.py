"""Helpers for the analysis-report tests: where the shared data lives, imported fixtures (one
import per session), and small profiles written from tables made in a test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dlscope.analysis.core.context import ProfileData, Selection
from dlscope.importers.run import import_files
from dlscope.store.build import ProfileBuilder
from dlscope.store.meta import Meta

from .conftest import CORPUS, CUT_IN_BUNDLE, DATA, REPO, SHARED, SHARED_CORPUS

T0 = 1_700_000_000_000_000_000  # epoch origin of the hand-made profiles
US = 1_000
TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns")


def shared_root() -> Path | None:
    """The project's shared/ directory where it is here (beside the clone or the worktrees)."""
    return SHARED if SHARED_CORPUS.is_dir() else None


def hta_entry_id(e: dict) -> str:
    """The test id of an entry of an HTA reference file (tests/data/hta/*.json)."""
    return f"{e['path']}{' (last step included)' if e['include_last_profiler_step'] else ''}"


def hta_entry_source(e: dict) -> Path | None:
    """Where an HTA reference entry's trace is here: in the repository, in shared/ beside the
    clone, or (without shared/) in the corpus folders bundled whole (HTA's numbers are for whole
    traces); None when it is not here."""
    if e["location"] == "repo":
        return REPO / e["path"]
    root = shared_root()
    if root:
        return root / e["path"]
    rel = e["path"].removeprefix("corpus/hta/")
    return CORPUS / rel if rel != e["path"] and not rel.startswith(CUT_IN_BUNDLE) else None


def fixture_path(name: str) -> Path:
    return DATA / "kineto" / f"{name}.trace.json.gz"


_IMPORTED: dict[str, Path] = {}


def imported(path: Path, tmp_factory: pytest.TempPathFactory) -> Path:
    """``path`` (a trace file or directory) imported once per test session."""
    key = str(path.resolve())
    if key not in _IMPORTED:
        _IMPORTED[key] = import_files([path], tmp_factory.mktemp("imp") / "p.dlscope")
    return _IMPORTED[key]


def hta_selection(data: ProfileData, include_last: bool) -> Selection:
    """HTA's choice of GPU work: with two or more ProfilerSteps, drop the last unless asked."""
    steps = [
        r[0]
        for r in data.con.execute(
            "SELECT DISTINCT step FROM steps WHERE source = 'profiler_step' ORDER BY step"
        ).fetchall()
    ]
    if len(steps) >= 2 and not include_last:
        return Selection(iter_start=steps[0], iter_stop=steps[-2])
    return Selection(include_warmup=True)


def open_fixture(name: str, tmp_factory: pytest.TempPathFactory, selection: Selection | None = None) -> ProfileData:
    return ProfileData.open(imported(fixture_path(name), tmp_factory), selection)


def make_profile(tmp_path: Path, meta: Meta | None = None, **tables: list[dict[str, Any]]) -> ProfileData:
    """A profile from rows given per table (times in ns from T0: rows hold offsets, T0 is added),
    written and opened. Steps default to not warm-up; ``meta`` (e.g. with devices) is written as
    given."""
    b = ProfileBuilder()
    for name, rows in tables.items():
        if not rows:
            continue
        cols: dict[str, list[Any]] = {}
        for r in rows:
            for k in r:
                cols.setdefault(k, [])
        for r in rows:
            for k in cols:
                v = r.get(k)
                cols[k].append(T0 + v if k in TIME_COLUMNS and v is not None else v)
        cols.setdefault("rank", [0] * len(rows))
        if name == "steps":
            cols.setdefault("warmup", [False] * len(rows))
            cols.setdefault("source", ["dlscope"] * len(rows))
        if name == "phases":
            cols.setdefault("kind", ["range"] * len(rows))
            cols.setdefault("source", ["dlscope"] * len(rows))
        if name == "api":
            cols.setdefault("kind", ["runtime"] * len(rows))
        b.add(name, pa.table(cols))
    out = tmp_path / f"h{len(list(tmp_path.glob('h*.dlscope')))}.dlscope"
    b.write(out, meta or Meta())
    return ProfileData.open(out)


@dataclass
class FakeFinding:
    """A finding with evidence of any shape (rows, text): what renderers must accept."""

    id: str
    title: str
    severity: str
    evidence: object
    saving_ms_per_step: float | None
    saving_pct: float | None
    advice: str
    url: str
