"""Import Nsight Systems SQLite exports (``nsys export --type sqlite``; also gzip-compressed).

What comes in: CUDA kernels, memcpy, memset, runtime and driver API calls, synchronization
(host waits), NVTX ranges and marks (application phases, source 'nvtx', with their domain and
push/pop or start/end style), the GPUs, the host and the profiled command. Timestamps move from
nsys's session clock to Unix epoch ns by the session start time (``meta.clock['nsys']`` records
the offset per file). Tables the export lacks leave their layer empty, and ``meta.collectors``
says why. ``--key-node NAME`` makes iterations from the NVTX range NAME, as DLProf did with
``--nsys_database``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..errors import NoStepsError
from ..store.build import ProfileBuilder, key_node_steps_sql
from ..store.db import query_arrow
from ..store.meta import CollectorStatus, Meta
from .base import Importer, ImportOptions
from .nsys_db import SQLITE_MAGIC, SUFFIXES, NsysExport, has_nsys_suffix, open_export
from .nsys_session import command, devices, driver_version, host_name, session_clock, session_span

if TYPE_CHECKING:  # numpy and pyarrow load with the first nsys file (an import of other formats needs neither)
    import pyarrow as pa

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)


def rank_of(path: Path, index: int, options: ImportOptions) -> int:
    """The rank of one input: forced by --rank, else named in the file name (``..._rank3...``),
    else the file's position among the inputs."""
    if options.rank is not None:
        return options.rank
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else index


def key_node_steps(phases: pa.Table | None, key_node: str, rank: int) -> pa.Table:
    """Iterations marked by the NVTX range ``key_node`` (DLProf semantics, as in
    ``analysis.iterations``): iteration i ends where the i-th instance ends and starts where the
    previous one ended; the first starts at its own start. Raises NoStepsError if it never occurs."""
    import pyarrow.compute as pc

    if phases is not None:
        hits = phases.filter(pc.and_(pc.equal(phases["name"], key_node), pc.equal(phases["kind"], "range")))
    if phases is None or hits.num_rows == 0:
        raise NoStepsError(
            f"no NVTX range named {key_node!r} was found to mark iterations "
            "(names are matched exactly, without the domain)"
        )
    con = duckdb.connect(":memory:")
    con.register("hits", hits.select(["start_ns", "end_ns", "pid", "tid"]))
    return query_arrow(con, key_node_steps_sql(f"(SELECT {int(rank)}::INTEGER AS rank, * FROM hits)"))


def _with_rank(t: pa.Table, rank: int) -> pa.Table:
    import numpy as np
    import pyarrow as pa

    return t.append_column("rank", pa.array(np.full(t.num_rows, rank, np.int32)))


def _set_status(meta: Meta, name: str, status: CollectorStatus) -> None:
    """Several files may report on one collector: any file that had the data makes it 'ok'."""
    old = meta.collectors.get(name)
    if old is None or (old.status != "ok" and status.status == "ok"):
        meta.collectors[name] = status
    elif old.status == "ok" and status.status == "ok":
        for k, v in status.settings.items():
            old.settings[k] = old.settings.get(k, 0) + v if isinstance(v, int) else v


class NsysImporter(Importer):
    name = "nsys"
    description = "Nsight Systems SQLite exports (.sqlite, .sqlite.gz from 'nsys export --type sqlite')"

    def sniff(self, path: Path, head: bytes) -> bool:
        # a file named like an export is claimed even when it is not SQLite, so that the user
        # hears what is wrong with it rather than that its format is unknown
        return head.startswith(SQLITE_MAGIC) or has_nsys_suffix(path)

    def expand_dir(self, directory: Path) -> list[Path]:
        return sorted(p for p in directory.iterdir() if p.is_file() and p.name.lower().endswith(SUFFIXES))

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        for i, path in enumerate(files):
            with open_export(path) as x:
                self._load_one(x, rank_of(path, i, options), options, builder, meta)

    def _load_one(self, x: NsysExport, rank: int, options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        from . import nsys_events as ev

        clock = session_clock(x)
        off = clock.offset_ns
        got: dict[str, pa.Table] = {}
        readers: dict[str, Callable[[NsysExport, int], pa.Table | None]] = {
            "kernels": ev.read_kernels,
            "memcpy": ev.read_memcpy,
            "memset": ev.read_memset,
            "api": ev.read_api,
            # waits take their thread and kind from the API calls read just before
            "sync": lambda x, off: ev.read_sync(x, off, got.get("api")),
        }
        for n, (name, read) in enumerate(readers.items()):
            if options.progress:
                options.progress(f"{x.path.name}: {name}", n / (len(readers) + 1))
            t = read(x, off)
            if t is not None and t.num_rows:
                got[name] = t
                builder.add(name, _with_rank(t, rank))
        rows = {name: t.num_rows for name, t in got.items()}
        phases, unclosed = ev.read_nvtx(x, off)
        if phases is not None:
            builder.add("phases", _with_rank(phases, rank))
        if options.key_node:
            builder.add("steps", key_node_steps(phases, options.key_node, rank))
        self._fill_meta(x, rank, clock.as_dict(), rows, phases, unclosed, meta)

    def _fill_meta(
        self,
        x: NsysExport,
        rank: int,
        clock: dict[str, Any],
        rows: dict[str, int],
        phases: pa.Table | None,
        unclosed: int,
        meta: Meta,
    ) -> None:
        import pyarrow.compute as pc

        from . import nsys_events as ev

        off = clock["offset_ns"]
        meta.ranks.append(rank)
        meta.clock.setdefault("nsys", []).append({"file": str(x.path), "rank": rank, **clock})
        # the time origin nsys prints trace timestamps from (cuda_gpu_trace's Start column)
        meta.clock.setdefault("origin_ns", off)
        span = session_span(x)
        if span is not None:
            start, end = span[0] + off, span[1] + off
            meta.start_ns = start if meta.start_ns is None else min(meta.start_ns, start)
            meta.end_ns = end if meta.end_ns is None else max(meta.end_ns, end)
        for d in devices(x):
            meta.add_device(d)
        meta.host = meta.host or host_name(x)
        meta.command = meta.command or command(x)
        drv = driver_version(x)
        if drv:
            meta.frameworks.setdefault("nvidia_driver", drv)
        meta.frameworks.setdefault("nsys", x.version())
        meta.note(f"imported from Nsight Systems {x.version()} (export schema {x.schema_version()})")
        if clock["offset_ns"] == 0:
            meta.note(
                f"{x.path.name}: no session start time in the export; times are nsys session time, not Unix epoch"
            )

        cuda_tables = [t for t in ("kernels", "memcpy", "memset", "api", "sync") if t in rows]
        if cuda_tables:
            _set_status(meta, "cupti", CollectorStatus("ok", settings={t: rows[t] for t in cuda_tables}))
            if "api" in rows:
                meta.note("nsys exports carry no CUPTI callback ids: api.cbid is empty")
        else:
            traced = "CUPTI_ACTIVITY_KIND_RUNTIME" in x.columns or "CUPTI_ACTIVITY_KIND_KERNEL" in x.columns
            _set_status(
                meta,
                "cupti",
                CollectorStatus(
                    "unavailable",
                    (
                        "the nsys export has CUDA tables but no CUDA events"
                        if traced
                        else "the nsys export has no CUDA trace (capture with 'nsys profile -t cuda')"
                    ),
                ),
            )
        n_ranges = 0 if phases is None else int(pc.sum(pc.equal(phases["kind"], "range")).as_py() or 0)
        if phases is not None:
            _set_status(
                meta, "nvtx", CollectorStatus("ok", settings={"ranges": n_ranges, "marks": phases.num_rows - n_ranges})
            )
        else:
            _set_status(
                meta,
                "nvtx",
                CollectorStatus(
                    "unavailable",
                    (
                        "the nsys export has no NVTX ranges or marks"
                        if ev.NVTX in x.columns
                        else "the nsys export has no NVTX trace (capture with 'nsys profile -t nvtx')"
                    ),
                ),
            )
        if unclosed:
            meta.note(
                f"{x.path.name}: {unclosed} NVTX range(s) never ended; they end at the last NVTX "
                "timestamp, as in nsys's summaries"
            )
        _set_status(
            meta,
            "torch",
            CollectorStatus(
                "unavailable",
                "an Nsight Systems export holds no framework ops (import a PyTorch/Kineto trace for that layer)",
            ),
        )
