"""Words a first reader took the wrong way (issue 41, item 7): each test asserts the new wording and
the absence of the old. The advice's words on a CPU-only run are in test_advice_rules.py, CUPTI's
on a machine without GPU in test_cupti.py."""

from __future__ import annotations

import io

from rich.console import Console

from dlscope import api
from dlscope.analysis.core.context import ProfileData
from dlscope.analysis.core.summary import summarize
from dlscope.capture.base import Settings
from dlscope.capture.fix_injector import FixInjector
from dlscope.capture.live_status import LiveStatus
from dlscope.capture.nvtx_emit import NvtxEmitter
from dlscope.capture.session import Session
from dlscope.capture.torch import TorchCollector
from dlscope.render.html.details import summary_section
from dlscope.render.terminal import render_summary
from dlscope.store.reader import open_profile

from .conftest import run_dlscope
from .test_summary_stats import make_profile


def test_warmup_excluded_says_how_many_steps(tmp_path):
    """'warm-up excluded: step 0' and 'warm-up 0 excluded' read as no warm-up at all."""
    s = summarize(ProfileData.open(make_profile(tmp_path, [5_000_000] * 8, lambda i: [("a", 1_000_000)])))
    buf = io.StringIO()
    render_summary(s, Console(file=buf, width=200, color_system=None))
    html = summary_section(s, None, None, None)
    for text in (buf.getvalue(), html):
        assert "warm-up excluded: 1 step (step 0)" in text
        assert "warm-up excluded: step 0" not in text and "warm-up 0 excluded" not in text


def _statuses(tmp_path, **settings) -> dict[str, tuple[str, str]]:
    s = Session(
        tmp_path / "o.dlscope",
        Settings(**settings),
        owner="api",
        collectors=[TorchCollector, NvtxEmitter, FixInjector, LiveStatus],
    )
    with api.Profile(s):
        pass
    return {k: (v.status, v.reason) for k, v in open_profile(tmp_path / "o.dlscope").meta.collectors.items()}


def test_collectors_off_by_default_are_not_said_turned_off_by_the_user(tmp_path):
    st = _statuses(tmp_path / "a", torch="off")
    assert st["torch"] == ("off", "turned off by the user")  # --torch off
    for name in ("nvtx", "fixes", "live"):  # nvtx without --nvtx, fixes outside `try`, live off a terminal
        assert st[name] == ("off", "off (default)"), name
    st = _statuses(tmp_path / "b", quiet=True)
    assert st["live"] == ("off", "turned off by the user (--quiet)")


def test_profile_help_says_what_full_mode_records():
    """The PyTorch layer's full mode adds record_shapes and profile_memory; with_stack stays off
    (capture/torch.py), as the README says."""
    r = run_dlscope("profile", "--help")
    help_text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert "'full' traces every step with input shapes and memory events (Python stacks are not recorded)" in help_text
    assert "shapes, stacks and memory" not in help_text
