"""Import a PyTorch memory timeline (``profile.export_memory_timeline("x.raw.json.gz")``).

The file is a JSON list of ``[time_ns, action, bytes, category]``: allocations (+bytes),
frees (-bytes) and re-categorizations (a -bytes/+bytes pair) of one device's tensors, by
category (parameters, activations, gradients ...). It becomes one counter track per category,
``mem_<category>`` in bytes: the running sum at every event.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from ..store.build import ProfileBuilder
from ..store.meta import Meta
from .base import Importer, ImportOptions
from .trace_json import _chunks

# torch.profiler._memory_profiler: the category index is the position in _CATEGORY_TO_COLORS
CATEGORIES = (
    "parameter",
    "optimizer_state",
    "input",
    "temporary",
    "activation",
    "gradient",
    "autograd_detail",
    "unknown",
)


class MemoryTimelineImporter(Importer):
    name = "memory_timeline"
    description = "PyTorch memory timeline (export_memory_timeline .raw.json[.gz])"

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        return text[:1] == b"[" and text[1:].lstrip()[:1] == b"["

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        import numpy as np
        import pyarrow as pa

        for path in files:
            try:
                rows = json.loads(b"".join(_chunks(path)))
                arr = np.asarray(rows, dtype=np.int64)
            except (ValueError, TypeError, OverflowError):  # not rows of four int64s
                raise InputError(
                    f"{path}: not a memory timeline (expected [time, action, bytes, category] rows)"
                ) from None
            if arr.ndim != 2 or arr.shape[1] != 4 or ((arr[:, 3] < 0) | (arr[:, 3] >= len(CATEGORIES))).any():
                raise InputError(f"{path}: not a memory timeline (expected [time, action, bytes, category] rows)")
            t = arr[:, 0].copy()
            real = t[t > 0]
            t[t <= 0] = real.min() if len(real) else 0  # pre-existing tensors: at the first event
            order = np.argsort(t, kind="stable")
            t, delta, cat = t[order], arr[order, 2], arr[order, 3]
            out_t, out_m, out_v = [], [], []
            for c in np.unique(cat):
                sel = cat == c
                out_t.append(t[sel])
                out_v.append(np.cumsum(delta[sel]).astype(np.float64))
                out_m += [f"mem_{CATEGORIES[c]}"] * int(sel.sum())
            rank = options.rank or 0
            n = sum(len(x) for x in out_t)
            builder.add(
                "counters",
                pa.table(
                    {
                        "rank": pa.array(np.full(n, rank, np.int32)),
                        "device": pa.nulls(n, pa.int32()),
                        "ts_ns": np.concatenate(out_t),
                        "metric": pa.array(out_m, pa.string()),
                        "value": np.concatenate(out_v),
                    }
                ),
            )
            meta.ranks.append(rank)
            meta.note(
                f"{path.name}: memory timeline by tensor category (counters mem_*); "
                "the file does not say which device it describes"
            )
