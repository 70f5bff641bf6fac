"""What the tests read must travel with the repository. A profile folder matches `.gitignore`'s
`*.dlscope/`, so a new one under tests/data is left out of a commit unless added by force; the
tests then pass here and fail on a clean clone (CI). This test fails here first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_no_file_under_tests_data_is_ignored_by_git():
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    # Ignored files only (untracked but not ignored ones show in `git status` already).
    out = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", "tests/data"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # A profile's derived-results cache is written by opening it and is meant to be ignored.
    left_out = [f for f in out if "/.cache/" not in f]
    assert left_out == [], f"ignored by git, so missing on a clean clone: {left_out[:5]}"
