"""Import Nsight Compute (ncu) CSV exports into the ``kernel_metrics`` table.

Reads both CSV pages ncu writes: ``--page details`` (one row per launch, section and metric, with
ncu's display names: "Compute (SM) Throughput") and ``--page raw`` (one row per launch, one
column per metric with raw names: ``sm__throughput.avg.pct_of_peak_sustained_elapsed``, and a
second row of units). What the profiled program printed around the CSV (``==PROF==`` lines, its
own output) is skipped. Values with ncu's scaled units (``usecond``, ``Mbyte``, ``Ghz``) are
converted to the base unit; settings that are not numbers ("PolicySpread") and the rule rows are
left out.

A ``.ncu-rep`` file is binary: export it first with ``ncu -i x.ncu-rep --csv --page details``.
"""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..store.build import ProfileBuilder
from ..store.meta import CollectorStatus, Meta
from .arrow_values import typed_array
from .base import Importer, ImportOptions, sniff_head

if TYPE_CHECKING:  # loaded with the first ncu file: registering importers must stay light
    import pyarrow as pa

ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name")
_HEADER = '"ID","Process ID","Process Name","Host Name",'
# raw-page columns that describe the launch, not metrics
_LAUNCH_COLUMNS = frozenset(
    {
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Kernel Time",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
        "Function Name",
        "Demangled Name",
        "Mangled Name",
    }
)

_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_SCALED = re.compile(r"^([KMGTP]?)(byte|hz|cycle|inst|warp|block|thread|request|sector|flop)(/(second|s))?(.*)$")


def base_unit(value: float, unit: str) -> tuple[float, str | None]:
    """``value`` in ``unit`` -> (value, unit) in the base unit (ns, byte, byte/s, hz, ...)."""
    unit = unit.strip()
    if not unit:
        return value, None
    if unit in _TIME:
        return value * _TIME[unit], "ns"
    m = _SCALED.match(unit)
    if m:
        prefix, base, per_second, _, rest = m.groups()
        return value * _PREFIX[prefix], base + ("/s" if per_second else "") + rest
    return value, unit


def _number(text: str) -> float | None:
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def csv_rows(text: str, path: Path) -> list[list[str]]:
    """The CSV part of an ncu log: from its header line on."""
    start = text.find(_HEADER)
    if start < 0:
        raise InputError(f"{path}: no Nsight Compute CSV header (export with ncu --csv --page details)")
    if start and text[start - 1] != "\n":
        raise InputError(f"{path}: the Nsight Compute CSV header is not at the start of a line")
    rows = list(csv.reader(io.StringIO(text[start:])))
    return [r for r in rows if r]


def parse_ncu_csv(text: str, path: Path, rank: int = 0) -> pa.Table:
    """kernel_metrics rows (text name columns) from an ncu CSV export, either page."""
    import pyarrow as pa

    rows = csv_rows(text, path)
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        records = _details(header, rows[1:], path)
    else:
        records = _raw(header, rows[1:], path)
    if not records:
        raise InputError(f"{path}: the Nsight Compute CSV has no metric values")
    cols: dict[str, list[Any]] = {k: [r[k] for r in records] for k in records[0]}
    return pa.table(
        {
            "rank": pa.array([rank] * len(records), pa.int32()),
            "device": typed_array(cols["device"], pa.int32()),
            "name": pa.array(cols["name"], pa.string()),
            "launch": typed_array(cols["launch"], pa.int32()),
            "section": pa.array(cols["section"], pa.string()),
            "metric": pa.array(cols["metric"], pa.string()),
            "value": pa.array(cols["value"], pa.float64()),
            "unit": pa.array(cols["unit"], pa.string()),
            "pid": pa.array(cols["pid"], pa.int64()),
        }
    )


def _int(text: str | None) -> int | None:
    """An integer column (device, launch id): a value that is not a finite number is unknown."""
    v = _number(text or "")
    return int(v) if v is not None and math.isfinite(v) and abs(v) < 2**63 else None


def _columns(header: list[str]) -> dict[str, int]:
    """Each column name's index: the first column of that name (a damaged header may repeat one)."""
    ix: dict[str, int] = {}
    for i, name in enumerate(header):
        ix.setdefault(name, i)
    return ix


def _details(header: list[str], rows: list[list[str]], path: Path) -> list[dict[str, Any]]:
    ix = _columns(header)
    need = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
    if any(n not in ix for n in need):
        raise InputError(f"{path}: not an ncu details CSV (columns {', '.join(need)} expected)")
    out = []
    last = max(ix[n] for n in need)
    for r in rows:
        if len(r) <= last:  # the rule columns after the value may be left out
            raise InputError(f"{path}: truncated row in the Nsight Compute CSV")
        r = r + [""] * (len(header) - len(r))
        metric = r[ix["Metric Name"]].strip()
        value = _number(r[ix["Metric Value"]])
        launch = _int(r[ix["ID"]])
        if not metric or value is None or launch is None:
            continue  # a rule's row, or a setting that is not a number
        v, unit = base_unit(value, r[ix["Metric Unit"]])
        out.append(
            {
                "device": _int(r[ix["Device"]]) if "Device" in ix else None,
                "name": r[ix["Kernel Name"]],
                "launch": launch,
                "section": r[ix["Section Name"]] if "Section Name" in ix else None,
                "metric": metric,
                "value": v,
                "unit": unit,
                "pid": _int(r[ix["Process ID"]]) if "Process ID" in ix else None,
            }
        )
    return out


def _raw(header: list[str], rows: list[list[str]], path: Path) -> list[dict[str, Any]]:
    if "Kernel Name" not in header:
        raise InputError(f"{path}: not an ncu CSV (no Kernel Name column)")
    ix = _columns(header)
    if any(len(r) < len(header) for r in rows):  # before the units row is looked for in the first
        raise InputError(f"{path}: truncated row in the Nsight Compute CSV")
    units: list[str] = [""] * len(header)
    if rows and not rows[0][ix["ID"]].strip():  # the units row of --page raw
        units, rows = rows[0], rows[1:]
    metrics = [(i, name) for i, name in enumerate(header) if name not in _LAUNCH_COLUMNS]
    out = []
    for r in rows:
        launch = _int(r[ix["ID"]])
        if launch is None:
            continue
        for i, name in metrics:
            value = _number(r[i])
            if value is None:
                continue
            v, unit = base_unit(value, units[i] if i < len(units) else "")
            out.append(
                {
                    "device": _int(r[ix["Device"]]) if "Device" in ix else None,
                    "name": r[ix["Kernel Name"]],
                    "launch": launch,
                    "section": None,
                    "metric": name,
                    "value": v,
                    "unit": unit,
                    "pid": _int(r[ix["Process ID"]]) if "Process ID" in ix else None,
                }
            )
    return out


def read_ncu_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(f"{path}: unreadable ({e.__class__.__name__}: {e})") from None


class NcuImporter(Importer):
    name = "ncu"
    description = "Nsight Compute CSV exports (ncu --csv --page details|raw, or ncu -i x.ncu-rep --csv)"

    def sniff(self, path: Path, head: bytes) -> bool:
        return _HEADER.encode() in head and b'"Kernel Name"' in head

    def expand_dir(self, directory: Path) -> list[Path]:
        return sorted(p for p in directory.rglob("*.csv") if p.is_file() and self.sniff(p, sniff_head(p)))

    def load(self, files: list[Path], options: ImportOptions, builder: ProfileBuilder, meta: Meta) -> None:
        for path in files:
            table = parse_ncu_csv(read_ncu_file(path), path, options.rank or 0)
            builder.add("kernel_metrics", table)
            launches = len(set(table.column("launch").to_pylist()))
            meta.collectors["ncu"] = CollectorStatus("ok", "", {"file": path.name, "launches": launches})
            if 0 not in meta.ranks:
                meta.ranks.append(options.rank or 0)
