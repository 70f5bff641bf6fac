"""The documents that describe the code stay true to it."""

from __future__ import annotations

from pathlib import Path

from dlscope.analysis import REPORTS
from dlscope.cli import COMMANDS
from dlscope.store.schema import describe

ROOT = Path(__file__).resolve().parents[1]


def test_format_doc_is_generated_from_the_schema():
    # regenerate with:
    # python -c "from dlscope.store.schema import describe; open('docs/format.md','w').write(describe())"
    assert (ROOT / "docs" / "format.md").read_text() == describe()


def test_readme_names_every_command_and_report():
    readme = (ROOT / "README.md").read_text()
    for cmd in COMMANDS:
        assert f"dlscope {cmd.name}" in readme, cmd.name
    for name in REPORTS:
        assert f"`{name}`" in readme, name
