"""Shared test helpers: a fake clock, CLI runners, and paths to the real fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from dlscope.cli import main

# The results cache off for the suite (tests/test_results_cache.py turns it on where it tests it): a test that
# patches a rule or a measurement must see its patch, not a result a run before it kept in the profile.
os.environ["DLSCOPE_NO_CACHE"] = "1"

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
EPOCH0 = 1_790_000_000_000_000_000  # an arbitrary epoch origin for fake clocks


class FakeClock:
    """A monotonic ns clock that moves only when told to."""

    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, ns: int) -> None:
        self.t += ns

    def wall(self) -> int:
        """A wall clock consistent with this one: epoch = EPOCH0 + monotonic."""
        return EPOCH0 + self.t


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


def q(con, sql: str) -> list[tuple]:
    """All rows of a query (works on every DuckDB release)."""
    return con.execute(sql).fetchall()


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `dlscope ARGS` in-process; returns (code, stdout, stderr)."""

    def run(*args: str) -> CliResult:
        code = main([str(a) for a in args])
        cap = capsys.readouterr()
        return CliResult(code, cap.out, cap.err)

    return run


def run_dlscope(*args: str, cwd: Path | None = None, timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    """Run the dlscope command line in a subprocess (needed for signals and child processes)."""
    env = dict(os.environ)
    env.pop("DLSCOPE_SESSION", None)
    return subprocess.run(
        [sys.executable, "-m", "dlscope", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def assert_one_line_error(err: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert "Traceback" not in err
    assert lines[0].startswith("dlscope: ")


KINETO = DATA / "kineto"
RESNET_TRACE = KINETO / "h100_resnet50_phases.trace.json.gz"
# the project's shared folder: beside the clone (CI), or beside the worktrees' folder
SHARED = next(
    (p for p in (REPO.parent / "shared", REPO.parent.parent / "shared") if p.is_dir()), REPO.parent / "shared"
)
SCALE_TRACE = SHARED / "fixtures" / "gpu" / "h100_gpt12_bf16_40steps.trace.json.gz"
# HTA's trace corpus: the whole of it in shared/, else the part bundled with the tests
# (tests/data/hta_corpus/make_subset.py says which)
SHARED_CORPUS = SHARED / "corpus" / "hta"
CORPUS = SHARED_CORPUS if SHARED_CORPUS.is_dir() else DATA / "hta_corpus"
# folders of the bundled part that hold less than the original (a window of the trace)
CUT_IN_BUNDLE = ("ns_resolution_trace",)


def strict() -> bool:
    """DLSCOPE_STRICT_TESTS=1: what a test needs and cannot find is a failure, not a skip."""
    return os.environ.get("DLSCOPE_STRICT_TESTS") == "1"


def need_file(path: Path) -> Path:
    """``path``, or skip the test when it is absent (a failure under DLSCOPE_STRICT_TESTS=1)."""
    if not path.exists():
        if strict():
            pytest.fail(f"{path} is missing")
        pytest.skip(f"{path} is not here (shared/ beside the clone has it)")
    return path


def require(module: str, why: str):
    """Import ``module``, or skip the test saying ``why`` (a failure under DLSCOPE_STRICT_TESTS=1)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        if strict():
            pytest.fail(why)
        pytest.skip(why)


def corpus_files() -> list[Path]:
    """Every trace of the corpus in use (see CORPUS)."""
    return sorted(p for p in CORPUS.rglob("*") if p.is_file() and p.suffix not in (".py", ".md"))


def corpus_id(path: Path) -> str:
    return str(path.relative_to(CORPUS))


def corpus_file(rel: str) -> Path:
    """A file or folder of the corpus; skipped where only the bundled part is here and lacks it."""
    return need_file(CORPUS / rel)


@pytest.fixture(scope="session")
def resnet_profile(tmp_path_factory) -> Path:
    """The ResNet-50 H100 trace (phases, ops, API calls, kernels, copies) as a profile."""
    from .kineto_tables import build_profile

    return build_profile(RESNET_TRACE, tmp_path_factory.mktemp("resnet") / "resnet.dlscope")
