"""A large trace's event array is carved into several files that DuckDB reads side by side: the
parts hold exactly the trace's events, a cut DuckDB cannot accept falls back to the whole array,
and the imported tables are the same however the array was cut."""

from __future__ import annotations

import gzip
import json

import duckdb
import pytest

from dlscope.importers import trace_json
from dlscope.importers.run import import_files

from .conftest import DATA

TRACE = DATA / "kineto" / "h100_gpt6_bf16.trace.json.gz"
TABLES = ("ops", "api", "kernels", "memcpy", "memset", "phases", "steps")


def _events(paths):
    out = []
    for p in paths:
        out += json.loads(p.read_bytes())
    return out


def test_parts_hold_exactly_the_traces_events(tmp_path):
    whole = json.loads(gzip.decompress(TRACE.read_bytes()))
    carved = trace_json.carve(TRACE, tmp_path, part_bytes=200_000)
    assert len(carved.events_paths) > 5  # 2 MB of events in 200 kB parts
    assert _events(carved.events_paths) == whole["traceEvents"]
    assert carved.metadata["deviceProperties"] == whole["deviceProperties"]
    joined = carved.joined()
    assert carved.events_paths == [joined] and json.loads(joined.read_bytes()) == whole["traceEvents"]


def test_metadata_after_the_array_is_cut_away_from_the_last_part(tmp_path):
    """Keys after traceEvents whose text looks like a cut between events (objects in an array,
    one per line) may be cut while streaming; the array's end is found afterwards, so the parts
    must still end exactly there."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
              for i in range(2000)]
    after = ",\n".join(json.dumps({"id": i, "name": "GPU " + "x" * 50}) for i in range(3000))
    text = ('{"schemaVersion": 1, "traceEvents": [\n' + ",\n".join(json.dumps(e) for e in events)
            + '\n], "deviceProperties": [\n' + after + '\n], "traceName": "t"}')
    path = tmp_path / "t.json"
    path.write_text(text)
    carved = trace_json.carve(path, tmp_path, part_bytes=30_000)
    assert len(carved.events_paths) > 1
    assert _events(carved.events_paths) == events
    assert len(carved.metadata["deviceProperties"]) == 3000 and carved.metadata["traceName"] == "t"


def _tables(profile):
    con = duckdb.connect()
    out = {}
    strings = f"read_parquet('{profile}/strings.parquet')"
    for t in TABLES:
        cols = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM read_parquet('{profile}/{t}.parquet')").fetchall()]
        named = [c for c in cols if c.endswith("_id") and c not in ("op_id", "parent_id", "correlation_id", "external_id")]
        sel = ", ".join([f"t.{c}" for c in cols if c not in named]
                        + [f"(SELECT value FROM {strings} s WHERE s.id = t.{c}) AS {c[:-3]}" for c in named])
        out[t] = sorted(map(repr, con.execute(f"SELECT {sel} FROM read_parquet('{profile}/{t}.parquet') t").fetchall()))
    return out


@pytest.mark.parametrize("nested_cuts", [False, True])
def test_import_is_the_same_with_one_file_or_many(tmp_path, monkeypatch, nested_cuts):
    """With small parts the tables equal those from one file. With ``nested_cuts`` the events'
    args hold arrays of objects written one per line, so some cuts fall inside an event: DuckDB
    refuses those parts and the import reads the joined array instead, with the same result."""
    source = TRACE
    if nested_cuts:
        whole = json.loads(gzip.decompress(TRACE.read_bytes()))
        lines = []
        for e in whole["traceEvents"]:
            if e.get("cat") == "kernel":
                e.setdefault("args", {})["blocks"] = "@@"
            lines.append(json.dumps(e).replace('"@@"', '[\n{"x": 1},\n{"x": 2}\n]'))
        meta = {k: v for k, v in whole.items() if k != "traceEvents"}
        source = tmp_path / "nested.json"
        source.write_text('{"traceEvents": [\n' + ",\n".join(lines) + "\n], "
                          + json.dumps(meta)[1:])
    one = import_files([source], tmp_path / "one.dlscope", force=True)
    monkeypatch.setattr(trace_json, "PART_BYTES", 100_000)
    seen = []
    real_carve = trace_json.carve

    def spy(*a, **k):
        c = real_carve(*a, **k)
        seen.append(len(c.events_paths))
        return c

    joins = []
    real_joined = trace_json.CarvedTrace.joined

    def joined(self):
        joins.append(len(self.events_paths))
        return real_joined(self)

    monkeypatch.setattr("dlscope.importers.kineto.carve", spy)
    monkeypatch.setattr(trace_json.CarvedTrace, "joined", joined)
    many = import_files([source], tmp_path / "many.dlscope", force=True)
    assert seen and seen[0] > 5
    assert bool(joins) == nested_cuts  # the fallback ran exactly when a cut fell inside an event
    assert _tables(one) == _tables(many)
