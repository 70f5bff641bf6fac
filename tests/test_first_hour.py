"""The first hour of a new user (issue 41): the README's quick start, run as written on the bundled
CPU example, says nothing misleading, and every command gives the profile the same throughput."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

from .conftest import REPO, run_dlscope

# what a first-hour user met that misled (issue 41): an unknown batch size, a function's repr
# instead of a table, the capture's internal "auto:" reasons, defaults called the user's choice
MISLEADING = ("unknown", "<function", "auto:", "turned off by the user")


def quick_start() -> list[list[str]]:
    """The commands of the README's quick start, as written (the environment's activation left out:
    the test runs in it already)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = section.split("```", 2)[1]
    commands = []
    for line in block.strip().splitlines():
        words = shlex.split(line.split("#", 1)[0])
        if words and words[0] == "dlscope":
            commands.append(words[1:])
    return commands


@pytest.fixture(scope="module")
def first_hour(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """Run the quick start in a fresh folder holding the examples; (profile, output per command)."""
    home = tmp_path_factory.mktemp("first_hour")
    shutil.copytree(REPO / "examples", home / "examples", ignore=shutil.ignore_patterns("data"))
    outputs: dict[str, str] = {}
    for args in quick_start():
        args = [sys.executable if a == "python" else a for a in args]
        r = run_dlscope(*args, cwd=home, timeout=300)
        assert r.returncode == 0, (args, r.stderr)
        outputs[args[0]] = r.stdout + r.stderr
    profile = home / "train_cpu.dlscope"
    assert profile.is_dir()
    return profile, outputs


def test_the_quick_start_is_the_five_commands_of_the_issue():
    assert [c[0] for c in quick_start()] == ["profile", "summary", "advise", "report"]


def test_the_quick_start_says_nothing_misleading(first_hour):
    profile, outputs = first_hour
    html = (profile.parent / "train_cpu.report.html").read_text()
    for command, text in [*outputs.items(), ("report.html", html)]:
        for phrase in MISLEADING:
            assert phrase not in text, (
                command,
                phrase,
                text[max(0, text.find(phrase) - 200) : text.find(phrase) + 100],
            )


def test_the_quick_start_gives_one_throughput(first_hour, tmp_path):
    profile, outputs = first_hour
    mean_ms = (
        duckdb.connect()
        .execute(f"""
        SELECT avg(end_ns - start_ns) / 1e6 FROM '{profile}/steps.parquet' WHERE NOT warmup AND NOT traced""")
        .fetchone()[0]
    )
    batch = json.loads((profile / "meta.json").read_text())["batch_size"]
    assert batch == 64  # the example's DataLoader(batch_size=64): no --batch-size was given
    steps_s, samples_s = 1e3 / mean_ms, batch * 1e3 / mean_ms

    summary = outputs["summary"]
    row = re.search(
        r"[\d.]+\s+│\s+([\d,.]+)\s+│\s+([\d,.]+)\s*$", summary.split("Steps", 1)[1].split("Phases", 1)[0], re.M
    )
    assert row, summary
    assert float(row.group(1).replace(",", "")) == pytest.approx(steps_s, abs=0.01)
    assert float(row.group(2).replace(",", "")) == pytest.approx(samples_s, abs=0.1)

    r = run_dlscope("diff", profile, profile, "--format", "json")
    tp = json.loads(r.stdout)["throughput"]
    assert tp["steps_per_s_a"] == pytest.approx(steps_s, rel=1e-9)
    assert tp["samples_per_s_b"] == pytest.approx(samples_s, rel=1e-9)

    page = (profile.parent / "train_cpu.report.html").read_text()
    assert f"{steps_s:,.2f} steps/s" in page and f"{samples_s:,.1f} samples/s" in page
