"""Import a PyTorch execution trace (``ExecutionTraceObserver``): the op graph with input shapes
and types, but no timings. With its Kineto trace in the same import, it adds shapes and types to
the ops that lack them (matched by record-function id); alone, it adds no events and the
profile says so."""

from __future__ import annotations

import json
from pathlib import Path

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
        self._bad_rf = 0  # nodes whose rf_id is there but is not one an op can carry

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        return text[:1] == b"{" and b'"nodes"' in head and b'"schema"' in head and b'"traceEvents"' not in head

    def expand_dir(self, directory: Path) -> list[Path]:
        return sorted(
            p
            for p in directory.rglob("*")
            if p.is_file() and (p.name.endswith((".et.json", ".et.json.gz")) or "_et." in p.name)
        )

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        self._nodes, self._files, self._bad_rf = [], [], 0
        for path in files:
            try:
                doc = json.loads(b"".join(_chunks(path)))
                nodes = doc["nodes"]
                for n in nodes:
                    rf = n.get("rf_id")
                    # a node without rf_id, or with 0, is the observer's own (the process root, a thread
                    # root); one whose rf_id is any other value that is not a positive int64 (damaged:
                    # past int64, negative, a string, true) matches no op, whose ids are int64, and is
                    # counted so that the loss shows
                    if isinstance(rf, int) and not isinstance(rf, bool) and 0 < rf < 2**63:
                        self._nodes.append(
                            (rf, json.dumps(n.get("input_shapes", [])), json.dumps(n.get("input_types", [])))
                        )
                    elif not (rf is None or (type(rf) is int and rf == 0)):
                        self._bad_rf += 1
            except (ValueError, KeyError, TypeError, AttributeError):
                raise InputError(f"{path}: not an execution trace (no node list)") from None
            self._files.append(path.name)
            meta.ranks.append(options.rank or 0)

    def finish(self, builder: ProfileBuilder, meta: Meta) -> None:
        if not self._files:
            return
        parts = builder.parts.get("ops", [])
        if not parts:
            meta.note(
                f"{', '.join(self._files)}: an execution trace has op structure but no timings; "
                "import it together with its Kineto trace to add input shapes to the ops"
            )
            return
        import pyarrow as pa

        con = builder.con
        con.register(
            "et_nodes",
            pa.table(
                {
                    "et_rf": [r for r, _, _ in self._nodes],
                    "et_shapes": [s for _, s, _ in self._nodes],
                    "et_types": [t for _, _, t in self._nodes],
                }
            ),
        )
        matched = 0
        for i, rel in enumerate(parts):
            have = {r[0] for r in con.execute(f"DESCRIBE {rel}").fetchall()}
            key = "coalesce(p.rf_id, p.external_id)" if "rf_id" in have else "p.external_id"
            cols = []
            for col, et_col in (("input_shapes", "et_shapes"), ("input_types", "et_types")):
                cols.append(f"coalesce(p.{col}, e.{et_col}) AS {col}" if col in have else f"e.{et_col} AS {col}")
            replaced = ", ".join(c for c in cols if c.split(" AS ")[1] in have)
            added = ", ".join(c for c in cols if c.split(" AS ")[1] not in have)
            select = "p.*" + (f" REPLACE ({replaced})" if replaced else "") + (f", {added}" if added else "")
            new = f"{rel}_with_et"
            con.execute(f"""CREATE OR REPLACE TEMP TABLE {new} AS SELECT {select} FROM {rel} p
                LEFT JOIN (SELECT et_rf, any_value(et_shapes) AS et_shapes, any_value(et_types) AS et_types
                           FROM et_nodes GROUP BY et_rf) e ON e.et_rf = {key}""")
            matched += con.execute(f"SELECT count(*) FROM {rel} p JOIN et_nodes e ON e.et_rf = {key}").fetchall()[0][0]
            parts[i] = new
        meta.note(f"{', '.join(self._files)}: input shapes and types of {matched} ops taken from the execution trace")
        if self._bad_rf:
            meta.note(
                f"{self._bad_rf} execution-trace node(s) with an rf_id that is not a positive 64-bit "
                "integer matched no op"
            )
