"""The step schedule (a pure function) and the spool's crash tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from dlscope.capture.schedule import Action, StepSchedule, parse_steps
from dlscope.errors import UsageError
from dlscope.store import spool


def test_default_schedule_flags_first_step_as_warmup():
    s = StepSchedule.from_options(None, None)
    assert [s.action(i) for i in range(3)] == [Action.WARMUP, Action.RECORD, Action.RECORD]


def test_window_with_warmup():
    s = StepSchedule.from_options("2:5", 1)
    assert [s.action(i).value for i in range(8)] == [
        "skip",
        "skip",
        "warmup",
        "record",
        "record",
        "record",
        "skip",
        "skip",
    ]
    assert StepSchedule.from_options("2:5", None).warmup == 0
    assert StepSchedule.from_options("3:", None).action(10**6) is Action.RECORD


@pytest.mark.parametrize("spec", ["5", "a:b", "5:2", "-1:3", ""])
def test_bad_step_specs(spec):
    with pytest.raises(UsageError):
        parse_steps(spec)


def test_spool_roundtrip_and_torn_tail(tmp_path):
    p = tmp_path / "1.events.spool"
    w = spool.EventSpoolWriter(p)
    w.write_blocks([(spool.PHASE, 3, 77, [10, -20, 30]), (spool.STEP, 0, 77, [25])])
    w.write_blocks([(spool.MARK, 4, 78, [40, 50, 60, 70])])
    w.close()
    blocks, torn = spool.read_event_blocks(p)
    assert not torn
    assert [(b.kind, b.a, b.b, b.values.tolist()) for b in blocks] == [
        (spool.PHASE, 3, 77, [10, -20, 30]),
        (spool.STEP, 0, 77, [25]),
        (spool.MARK, 4, 78, [40, 50, 60, 70]),
    ]
    # a kill in the middle of the last block: keep its whole values, say it was torn
    data = p.read_bytes()
    p.write_bytes(data[:-13])
    blocks, torn = spool.read_event_blocks(p)
    assert torn and blocks[-1].values.tolist() == [40, 50]
    # a kill inside a header: the header is dropped
    p.write_bytes(data[: len(spool.MAGIC) + 32 + 24 + 10])
    blocks, torn = spool.read_event_blocks(p)
    assert torn and len(blocks) == 1


def test_spool_rejects_foreign_and_corrupt_files(tmp_path):
    p = tmp_path / "x.events.spool"
    p.write_bytes(b"not a spool at all")
    with pytest.raises(ValueError):
        spool.read_event_blocks(p)
    p.write_bytes(spool.MAGIC + np.array([99, 0, 0, 1, 5], dtype="<i8").tobytes())
    with pytest.raises(ValueError):
        spool.read_event_blocks(p)


def test_strings_file_ignores_torn_last_line(tmp_path):
    p = tmp_path / "1.strings.jsonl"
    w = spool.StringSpoolWriter(p)
    w.write([(0, "a"), (1, 'quote " and \\ newline\n')])
    w.close()
    with open(p, "a") as f:
        f.write('[2, "unfinish')
    assert spool.read_strings(p) == {0: "a", 1: 'quote " and \\ newline\n'}
