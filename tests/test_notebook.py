"""examples/analysis.ipynb runs end to end (nbclient), so the notebook cannot rot."""

from __future__ import annotations

from pathlib import Path

from .conftest import require

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_analysis_notebook_executes():
    nbformat = require("nbformat", "the notebook test needs nbformat, nbclient and ipykernel (the test extra)")
    nbclient = require("nbclient", "the notebook test needs nbclient (the test extra)")
    require("ipykernel", "the notebook test needs ipykernel (the test extra)")
    nb = nbformat.read(EXAMPLES / "analysis.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    html = [o["data"]["text/html"] for o in outputs if "data" in o and "text/html" in o["data"]]
    assert any("amp_not_enabled" in h for h in html)  # the profile's view names its top finding
    assert not any("<script" in h.lower() for h in html)
    assert not [o for o in outputs if o.get("output_type") == "error"]
