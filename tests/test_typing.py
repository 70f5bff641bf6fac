"""The type checker's escapes stay few and explained: every ``# type: ignore`` in src/ names the
error it silences and says why on the same line (mypy itself, run by ./scripts/test.sh with
warn_unused_ignores, fails on one that silences nothing)."""

from __future__ import annotations

import re

from .conftest import REPO

IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def ignores() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted((REPO / "src" / "dlscope").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if IGNORE.search(line):
                found.append((str(path.relative_to(REPO)), n, line))
    return found


def unexplained(lines: list[tuple[str, int, str]]) -> list[str]:
    bad = []
    for where, n, line in lines:
        m = IGNORE.search(line)
        assert m
        if not m.group("codes") or not re.match(r"\s*#\s*\S", m.group("rest")):
            bad.append(f"{where}:{n}: {line.strip()}")
    return bad


def test_every_type_ignore_names_its_code_and_says_why():
    assert unexplained(ignores()) == []


def test_the_check_finds_a_bare_ignore():
    planted = [
        ("x.py", 1, "y = f()  # type: ignore"),
        ("x.py", 2, "y = f()  # type: ignore[arg-type]"),
        ("x.py", 3, "y = f()  # type: ignore[arg-type]  # f takes Any"),
    ]
    assert [b.split(":")[1] for b in unexplained(planted)] == ["1", "2"]
