"""The event array carved into parts parsed side by side: the same events, in the same order,
as reading the array whole, and a cut that falls inside an event is caught."""

from __future__ import annotations

import gzip
import json

import pyarrow.parquet as pq
import pytest

from dlscope.importers import trace_json
from dlscope.importers.run import import_files

from .conftest import DATA

TRACE = DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz"
TABLES = ("ops", "api", "kernels", "memcpy", "memset", "phases", "steps", "strings")


@pytest.fixture()
def small_parts(monkeypatch):
    """Parts of 64 KiB: the small test traces are cut many times."""
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 64 << 10)


def _events(doc: dict) -> list[dict]:
    return doc["traceEvents"]


def test_stream_size_is_the_decompressed_size():
    assert trace_json.stream_size(TRACE) == len(gzip.decompress(TRACE.read_bytes()))


def test_parts_hold_the_events_in_order(tmp_path, small_parts):
    carved = trace_json.carve(TRACE, tmp_path, parts=8)
    assert len(carved.event_files) == 8
    got = [e for f in carved.event_files for e in json.loads(f.read_bytes())]
    assert got == _events(json.loads(gzip.decompress(TRACE.read_bytes())))
    assert carved.metadata["schemaVersion"] == 1


def test_parts_with_metadata_after_the_array(tmp_path, monkeypatch):
    """Keys after traceEvents (Kineto's "traceName", here also a list of objects) are metadata,
    even when a cut was made in them: the part cut there is dropped."""
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 1 << 10)
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"][:400]
    tail = {"deviceTail": [{"a": i} for i in range(3000)], "traceName": "x"}
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, **tail}, indent=1)
    assert text.index('"deviceTail"') < 0.7 * len(text)  # the last of 4 equal parts starts in the tail
    src = tmp_path / "t.json"
    src.write_text(text)
    (tmp_path / "w").mkdir()
    carved = trace_json.carve(src, tmp_path / "w", parts=4)
    assert len(carved.event_files) == 3
    got = [e for f in carved.event_files for e in json.loads(f.read_bytes())]
    assert got == events
    assert carved.metadata["traceName"] == "x" and len(carved.metadata["deviceTail"]) == 3000


def _tables(profile) -> dict:
    return {t: pq.read_table(profile / f"{t}.parquet").to_pylist() for t in TABLES}


def test_import_in_parts_equals_import_whole(tmp_path, monkeypatch):
    whole = _tables(import_files([TRACE], tmp_path / "whole.dlscope"))
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 64 << 10)
    parted = _tables(import_files([TRACE], tmp_path / "parts.dlscope"))
    assert whole["ops"] and whole["kernels"]
    assert parted == whole


def test_a_cut_inside_an_event_falls_back_to_the_whole_array(tmp_path, monkeypatch):
    """Every event ends with a string holding "}, {": cuts land inside it, the parts are not
    valid JSON, and the import reads the array whole: the same tables as with one part."""
    doc = json.loads(gzip.decompress(TRACE.read_bytes()))
    for e in doc["traceEvents"]:
        e["zz_note"] = "}, {"
    src = tmp_path / "braces.json"
    src.write_text(json.dumps(doc, indent=1))
    whole = _tables(import_files([src], tmp_path / "whole.dlscope"))
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 64 << 10)
    carved = trace_json.carve(src, tmp_path, parts=8)
    assert len(carved.event_files) > 1
    with pytest.raises(ValueError):  # the cuts did fall inside names
        [json.loads(f.read_bytes()) for f in carved.event_files]
    parted = _tables(import_files([src], tmp_path / "parts.dlscope"))
    assert parted == whole


def test_parts_that_do_not_fit_in_memory_at_once_are_parsed_in_turn(tmp_path, monkeypatch):
    """DuckDB out of memory with every part at once (8 threads under 200 MB did): the parts are
    parsed one at a time, and the tables are those of a plain import."""
    from dlscope.importers import parallel_parse

    whole = _tables(import_files([TRACE], tmp_path / "whole.dlscope"))
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 64 << 10)
    real = parallel_parse._parse_parts
    calls = []

    def parse_parts(con, parts, files, select, workers):
        calls.append(workers)
        if workers > 1:
            raise parallel_parse.duckdb.OutOfMemoryException("failed to allocate")
        return real(con, parts, files, select, workers)

    monkeypatch.setattr(parallel_parse, "_parse_parts", parse_parts)
    monkeypatch.setattr(parallel_parse.db, "default_threads", lambda: 2)  # on a 1-core machine too
    parted = _tables(import_files([TRACE], tmp_path / "parts.dlscope"))
    assert calls == [2, 1]
    assert parted == whole


def test_a_traced_window_read_in_parts_at_finalize(tmp_path, monkeypatch):
    """The PyTorch layer's finalize reads each traced window with the importer's reader: with
    the window's events in parts (its event table then a view), the same tables come out, and
    the parts are dropped (dropping the view as a table failed)."""
    from dlscope.capture.base import DecodeContext
    from dlscope.capture.torch import TorchCollector
    from dlscope.importers import kineto

    (tmp_path / "7.torch.windows.json").write_text(json.dumps({"windows": [{"marker": None, "window": [0, 1, 1]}]}))
    (tmp_path / "7.torch.1.json").write_bytes(gzip.decompress(TRACE.read_bytes()))

    def decode() -> dict:
        tables = TorchCollector.decode(tmp_path, 7, DecodeContext(pid=7, rank=0, offset_ns=0, session={}))
        # rows in any order: the builder sorts every table when it writes the profile
        return {name: sorted(map(repr, t.to_pylist())) for name, t in tables.items()}

    whole = decode()
    files = []
    real = kineto.create_in_order
    monkeypatch.setattr(
        kineto, "create_in_order", lambda con, name, fs, select: files.append(len(fs)) or real(con, name, fs, select)
    )
    monkeypatch.setattr(trace_json, "MIN_PART_BYTES", 64 << 10)
    monkeypatch.setattr(kineto.db, "default_threads", lambda: 2)
    parted = decode()
    assert files == [2]
    assert whole["ops"] and parted == whole
