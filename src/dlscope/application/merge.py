"""The merge use case: the profiles of one job's hosts written into one profile, on one clock.

Each host records its own ranks on its own clock; the clocks are aligned from the collectives the
profiles share (``analysis.clock_align``), and every table is written again through the builder.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    import pyarrow as pa

    from ..analysis.core.clock_align import ClockFit
    from ..analysis.core.context import ProfileData
    from ..store.meta import Meta

TIME_COLUMNS = ("start_ns", "end_ns", "ts_ns", "gpu_start_ns", "gpu_end_ns")


def merge_profiles(hosts: list[ProfileData], out: Path) -> list[ClockFit]:
    """Write ``hosts`` (the first: the reference clock, reordered so it holds the lowest rank)
    into one profile at ``out``; returns each other host's clock fit, in order."""
    from ..analysis.core.clock_align import fit_clock
    from ..store.build import ProfileBuilder

    hosts = sorted(hosts, key=lambda d: min(d.meta.ranks or [0]))
    seen: dict[int, str] = {}
    for d in hosts:
        for r in d.meta.ranks or [0]:
            if r in seen:
                raise InputError(
                    f"rank {r} is in both {seen[r]} and {d.path}: each host's profile must hold its own ranks"
                )
            seen[r] = str(d.path)
    ref = hosts[0]
    fits: list[ClockFit] = []
    builder = ProfileBuilder()
    for name, t in decoded_tables(ref).items():
        builder.add(name, t)
    for d in hosts[1:]:
        fit = fit_clock(ref, d)
        if fit is None:
            raise InputError(
                f"{d.path} shares no collective with {ref.path} (at least 3 are needed to align "
                "the clocks): record the same steps on every host"
            )
        fits.append(fit)
        for name, t in decoded_tables(d).items():
            builder.add(name, _shift(t, fit))
    builder.write(out, _merged_meta(hosts, fits))
    return fits


def decoded_tables(data: ProfileData) -> dict[str, pa.Table]:
    """Every table of ``data`` with its names as text, as the builder takes them."""
    from ..store import db
    from ..store.schema import NAME_COLUMNS, TABLES

    out: dict[str, pa.Table] = {}
    for spec in TABLES:
        if spec.name == "strings" or not data.has(spec.name):
            continue
        text_of = {idcol: text for text, idcol in NAME_COLUMNS.get(spec.name, {}).items()}
        cols = ", ".join(f'"{text_of.get(c, c)}"' for c in spec.column_names())
        out[spec.name] = db.query_arrow(data.con, f"SELECT {cols} FROM {spec.name}")
    return out


def _shift(t: pa.Table, fit: ClockFit) -> pa.Table:
    import pyarrow as pa

    for c in TIME_COLUMNS:
        if c in t.column_names:
            col = t.column(c).to_numpy(zero_copy_only=False)
            t = t.set_column(t.schema.get_field_index(c), c, pa.array(fit.to_ref(col), pa.int64()))
    return t


def _merged_meta(hosts: list[ProfileData], fits: list[ClockFit]) -> Meta:
    import numpy as np

    from ..store.meta import Meta

    ref = hosts[0].meta
    meta = Meta.from_dict(ref.to_dict())
    meta.source = f"merged:{len(hosts)} hosts"
    meta.inputs = [str(d.path) for d in hosts]
    meta.ranks = sorted({r for d in hosts for r in d.meta.ranks or [0]})
    meta.world_size = max([d.meta.world_size or 0 for d in hosts] + [len(meta.ranks)])
    meta.devices = [dev | {"host": d.meta.host} for d in hosts for dev in d.meta.devices]
    starts = [ref.start_ns] + [
        int(f.to_ref(np.array([d.meta.start_ns]))[0]) for d, f in zip(hosts[1:], fits) if d.meta.start_ns is not None
    ]
    ends = [ref.end_ns] + [
        int(f.to_ref(np.array([d.meta.end_ns]))[0]) for d, f in zip(hosts[1:], fits) if d.meta.end_ns is not None
    ]
    meta.start_ns = min((v for v in starts if v is not None), default=None)
    meta.end_ns = max((v for v in ends if v is not None), default=None)
    meta.clock = {
        "domain": "unix_epoch_ns",
        "reference_host": ref.host,
        "aligned": [
            {
                "profile": str(d.path),
                "host": d.meta.host,
                "offset_ns": f.offset_ns,
                "drift_ppm": f.drift_ppm,
                "collectives": f.matched,
                "residual_max_ns": f.residual_max_ns,
                "residual_rms_ns": f.residual_rms_ns,
            }
            for d, f in zip(hosts[1:], fits)
        ],
    }
    for d, f in zip(hosts[1:], fits):
        meta.note(
            f"{d.path} ({d.meta.host or 'host'}) aligned to {hosts[0].path}: offset {f.offset_ns / 1e6:+.3f} ms, "
            f"drift {f.drift_ppm:+.2f} ppm from {f.matched} collectives, residual max "
            f"{f.residual_max_ns / 1e3:.1f} us"
        )
    for d in hosts[1:]:
        meta.notes += [n for n in d.meta.notes if n not in meta.notes]
    return meta
