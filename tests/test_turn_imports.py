"""What a run of dlscope try started ahead imports before its turn (issue 38): the modules of the
interpreter's library and installed packages an earlier run of the program had imported, never the
program's own (their import would run its code before its turn) nor dlscope's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dlscope.capture import turn

SRC = Path(__file__).resolve().parents[1] / "src"


def test_a_run_names_its_library_modules_not_its_own(tmp_path):
    (tmp_path / "own_helpers.py").write_text("import fractions\n")
    prog = tmp_path / "prog.py"
    prog.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(SRC)!r})\n"
        "import own_helpers\n"
        "from dlscope.capture import turn\n"
        "print(json.dumps(turn.imported_modules()))\n"
    )
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    names = json.loads(r.stdout)
    assert "fractions" in names and "json" in names  # imported by the program's own module, and by it
    assert "own_helpers" not in names and "__main__" not in names
    assert not [n for n in names if n == "dlscope" or n.startswith("dlscope.")]
    # in import order: a module after those it imports first
    assert names.index("numbers") < names.index("fractions")


def test_the_mark_names_the_modules_and_a_run_started_ahead_imports_them(tmp_path):
    from dlscope.capture.base import Settings
    from dlscope.capture.launcher import ProfiledRun

    turn.mark_measured(tmp_path)
    named = turn.read_mark(tmp_path)
    assert "json" in named and set(named) == set(turn.imported_modules()) and turn.read_mark(tmp_path / "none") == ()
    marker = tmp_path / "seen.json"
    prog = tmp_path / "prog.py"
    prog.write_text(f"import json, sys\njson.dump('wave' in sys.modules, open({str(marker)!r}, 'w'))\n")
    run = ProfiledRun([sys.executable, str(prog)], tmp_path / "p.dlscope", Settings(), ahead=("wave", "no_such_mod"))
    assert (tmp_path / "p.dlscope" / turn.PREIMPORT).read_text() == "wave\nno_such_mod\n"
    run.go()
    assert run.proc.wait(timeout=60) == 0
    run.finish()
    assert json.loads(marker.read_text()) is True  # imported before its turn; a missing one passed over
    assert not (tmp_path / "p.dlscope" / turn.PREIMPORT).exists()


def test_ahead_only_the_frameworks_packages():
    """Of what an earlier run imported, only the recorded frameworks' packages are imported ahead (with
    what they pull in): a library such as huggingface_hub reads the environment as it is imported,
    which the program may set in its own code first."""
    imported = ("os", "torch", "torch._dynamo", "sympy", "huggingface_hub.constants", "torchvision", "torch.optim")
    assert turn.ahead_imports(("torch",), imported) == ("torch", "torch._dynamo", "torch.optim")
    assert turn.ahead_imports((), imported) == ()
