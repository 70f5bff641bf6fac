"""Import a PyTorch execution trace (``ExecutionTraceObserver``): the op graph with input shapes
and types, but no timings. With its Kineto trace in the same import, it adds shapes and types to
the ops that lack them (matched by record-function id); alone, it adds no events and the
profile says so."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..store.build import ProfileBuilder
from ..store.meta import Meta
from .base import Importer, ImportOptions
from .trace_json import _chunks


class ExecutionTraceImporter(Importer):
    name = "execution_trace"
    description = "PyTorch execution trace (ExecutionTraceObserver JSON)"

    def __init__(self) -> None:
        self._nodes: list[tuple[int, str, str]] = []  # (rf_id, input_shapes, input_types)
        self._files: list[str] = []

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        return text[:1] == b"{" and b'"nodes"' in head and b'"schema"' in head and b'"traceEvents"' not in head

    def expand_dir(self, directory: Path) -> list[Path]:
        return sorted(p for p in directory.rglob("*") if p.is_file() and
                      (p.name.endswith((".et.json", ".et.json.gz")) or "_et." in p.name))

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        self._nodes, self._files = [], []
        for path in files:
            try:
                doc = json.loads(b"".join(_chunks(path)))
                nodes = doc["nodes"]
                for n in nodes:
                    rf = n.get("rf_id")
                    if isinstance(rf, int) and rf > 0:
                        self._nodes.append((rf, json.dumps(n.get("input_shapes", [])),
                                            json.dumps(n.get("input_types", []))))
            except (ValueError, KeyError, TypeError, AttributeError):
                raise InputError(f"{path}: not an execution trace (no node list)") from None
            self._files.append(path.name)
            meta.ranks.append(options.rank or 0)

    def finish(self, builder: ProfileBuilder, meta: Meta) -> None:
        if not self._files:
            return
        parts = builder.parts.get("ops", [])
        if not parts:
            meta.note(f"{', '.join(self._files)}: an execution trace has op structure but no timings; "
                      "import it together with its Kineto trace to add input shapes to the ops")
            return
        et = pa.table({"et_rf": [r for r, _, _ in self._nodes], "et_shapes": [s for _, s, _ in self._nodes],
                       "et_types": [t for _, _, t in self._nodes]})
        matched = 0
        for i, ops in enumerate(parts):
            key = ops.column("rf_id") if "rf_id" in ops.column_names else pa.nulls(ops.num_rows, pa.int64())
            key = pc.coalesce(key, ops.column("external_id"))
            idx = pc.index_in(key, value_set=et.column("et_rf"))
            shapes = et.column("et_shapes").take(idx)
            types = et.column("et_types").take(idx)
            matched += ops.num_rows - idx.null_count
            for col, new in (("input_shapes", shapes), ("input_types", types)):
                old = ops.column(col) if col in ops.column_names else pa.nulls(ops.num_rows, pa.string())
                merged = pc.coalesce(old, new)
                ops = ops.set_column(ops.schema.get_field_index(col), col, merged) if col in ops.column_names \
                    else ops.append_column(col, merged)
            parts[i] = ops
        meta.note(f"{', '.join(self._files)}: input shapes and types of {matched} ops taken from the execution trace")
