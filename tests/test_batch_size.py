"""The batch size without --batch-size (issue 41, item 4): read from the program's DataLoader at
its first batch, recorded with where it came from, and used for samples/s."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from dlscope.capture.batch_size import FIRST_BATCH, GIVEN, LOADER, detect_batch_size
from dlscope.store.meta import Meta, shape_problem

from .conftest import REPO, run_dlscope

PROGRAMS = Path(__file__).parent / "programs"


def test_the_loaders_attribute_wins_then_the_first_tensor():
    batch = (np.zeros((7, 3)), np.zeros(7))
    assert detect_batch_size(8, batch) == (8, LOADER)
    assert detect_batch_size(None, batch) == (7, FIRST_BATCH)
    # depth first through dicts and lists; a scalar or a string is no batch dimension
    assert detect_batch_size(None, {"meta": "x", "n": np.float32(1), "ids": [np.zeros((5, 2))]}) == (5, FIRST_BATCH)
    assert detect_batch_size(None, {"label": 3}) is None
    assert detect_batch_size(True, None) is None  # a bool is not a batch size


def _profile(tmp_path: Path, *command: str) -> tuple[dict, dict]:
    out = tmp_path / "p.dlscope"
    r = run_dlscope("profile", "-o", out, "--quiet", "--", sys.executable, *command, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "meta.json").read_text())
    s = run_dlscope("summary", out, "--format", "json")
    assert s.returncode == 0, s.stderr
    return meta, json.loads(s.stdout)["steps"]


@pytest.mark.parametrize(
    ("script", "size", "source"),
    [
        ("unmodified_train.py", 16, LOADER),  # DataLoader(data, batch_size=16)
        ("prebatched.py", 5, FIRST_BATCH),  # DataLoader(batch_size=None) of batches of 5
    ],
)
def test_profile_without_batch_size_reads_the_loader(tmp_path, script, size, source):
    meta, steps = _profile(tmp_path, str(PROGRAMS / script), "12")
    assert (meta["batch_size"], meta["batch_size_source"]) == (size, source)
    assert (steps["batch_size"], steps["batch_size_source"]) == (size, source)
    assert steps["samples_per_s"] == pytest.approx(size * steps["steps_per_s"])
    text = run_dlscope("summary", tmp_path / "p.dlscope").stdout
    assert f"(batch {size}, from {source})" in text and "batch size unknown" not in text


def test_the_cpu_example_gives_64_samples_a_step(tmp_path):
    # examples/train_cpu.py: DataLoader(batch_size=64), and dlscope.profile(batch_size=64) inside
    shutil.copy(REPO / "examples" / "train_cpu.py", tmp_path)
    meta, steps = _profile(tmp_path, "train_cpu.py", "--steps", "12")
    assert (meta["batch_size"], meta["batch_size_source"]) == (64, GIVEN)
    assert steps["samples_per_s"] == pytest.approx(64 * steps["steps_per_s"])


def test_profiles_without_the_source_still_open():
    raw = {"batch_size": 32, "warmup_steps": 1}  # meta.json written before batch_size_source
    assert shape_problem(raw) is None
    meta = Meta.from_dict(raw)
    assert (meta.batch_size, meta.batch_size_source) == (32, None)
