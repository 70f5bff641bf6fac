"""What the nsys-equivalent reports share: nsys's statistics, rounding, names and scope.

``nsys stats`` computes its summaries in SQLite: the average is sum / count, the median of an even
count is the mean of the two middle values, the standard deviation is the sample one (n - 1) and
0 for a single value, and durations, averages and shares are rounded with SQLite's ``round(x, 1)``,
which rounds halves away from zero. Sizes are shown in MB (10^6 bytes) with three decimals. The
reports here compute the same statistics with DuckDB over the profile's views and keep the raw
values; the formatters below reproduce nsys's text.

Scope: nsys has no iterations, so by default these reports cover the whole profile, as nsys does
(warm-up steps included). When the user selects iterations (``--iter-start``/``--iter-stop`` or
``--key-node``), they cover only the events of the selected steps (GPU work counts in the step
that launched it; work whose launch was not recorded although it names one, launched before
tracing began, is in no step, as in :mod:`.gpu_work` and HTA).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .context import ProfileData
from .report import Formatter, Report

# copy_kind -> the operation name nsys prints ('[CUDA memcpy Host-to-Device]')
COPY_LABELS = {
    "HtoD": "Host-to-Device",
    "DtoH": "Device-to-Host",
    "DtoD": "Device-to-Device",
    "HtoH": "Host-to-Host",
    "PtoP": "Peer-to-Peer",
    "HtoA": "Host-to-Array",
    "AtoH": "Array-to-Host",
    "AtoA": "Array-to-Array",
    "AtoD": "Array-to-Device",
    "DtoA": "Device-to-Array",
    "UVM_HtoD": "Unified Host-to-Device",
    "UVM_DtoH": "Unified Device-to-Host",
    "UVM_DtoD": "Unified Device-to-Device",
    "unknown": "Unknown",
}
# src_kind / dst_kind / mem_kind -> nsys's memory kind label
MEMORY_LABELS = {
    "pageable": "Pageable",
    "pinned": "Pinned",
    "device": "Device",
    "array": "Array",
    "managed": "Managed",
    "device_static": "Device Static",
    "managed_static": "Managed Static",
    "unknown": "Unknown",
}
MEMSET_NAME = "[CUDA memset]"

# the statistic columns of every duration summary, in nsys's order (the count column varies)
DURATION_COLUMNS = (
    "Time (%)",
    "Total Time (ns)",
    "{count}",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
)


def half_up(digits: int) -> Formatter:
    """Format like SQLite's ``round(x, digits)`` as nsys prints it: the exact value of the double,
    rounded half away from zero (Python's own formatting would round half to even)."""
    quantum = Decimal(1).scaleb(-digits)

    def fmt(v: Any) -> str:
        if v is None:
            return ""
        return str(Decimal(float(v)).quantize(quantum, rounding=ROUND_HALF_UP))

    return fmt


def megabytes(digits: int = 3) -> Formatter:
    """A value already in MB, printed as nsys prints sizes."""

    def fmt(v: Any) -> str:
        return "" if v is None else f"{float(v):.{digits}f}"

    return fmt


def duration_formats() -> dict[str, Formatter]:
    """Formats of the columns of :func:`summary_sql` (integers print as they are)."""
    one = half_up(1)
    return {"Time (%)": one, "Avg (ns)": one, "Med (ns)": one, "StdDev (ns)": one}


def label_sql(column: str, labels: dict[str, str], default: str = "Unknown") -> str:
    """SQL CASE turning one of dlscope's enum strings into nsys's label."""
    whens = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in labels.items())
    return f"CASE {column} {whens} ELSE '{default}' END"


def memcpy_name_sql(copy_kind: str = "copy_kind") -> str:
    return f"'[CUDA memcpy ' || {label_sql(copy_kind, COPY_LABELS)} || ']'"


def api_name_sql(name: str = "name") -> str:
    """The name nsys prints for an API call: CUPTI's ``_v`` + four-digit version suffix dropped
    (``cudaLaunchKernel_v7000``), longer ones kept (``cudaStreamIsCapturing_v10000``). The nsys
    importer stores names this way already; recorded CUPTI names may still carry the suffix."""
    return f"CASE WHEN {name} LIKE '%\\_v____' ESCAPE '\\' THEN left({name}, length({name}) - 6) ELSE {name} END"


def selects_steps(data: ProfileData) -> bool:
    """True when the user chose iterations, so the nsys reports cover only those."""
    sel = data.selection
    return sel.iter_start is not None or sel.iter_stop is not None or bool(sel.key_node)


def in_selection(data: ProfileData, alias: str) -> str:
    """SQL condition on rows of ``alias`` (a view with rank and step): in the selected steps, or
    TRUE when no iterations were chosen."""
    if not selects_steps(data):
        return "TRUE"
    return f"EXISTS (SELECT 1 FROM sel_steps s WHERE s.rank = {alias}.rank AND s.step = {alias}.step)"


def gpu_in_selection(data: ProfileData, alias: str) -> str:
    """SQL condition on GPU rows of ``alias`` (kernels, copies, sets): :func:`in_selection`, and
    when iterations are chosen, a recorded launch where the row names one. GPU work carries the
    step of the call that launched it, but work launched before tracing began carries the step
    it ran in; it was launched in no selected step (:func:`.gpu_work.selected_sql` and HTA drop
    it too)."""
    cond = in_selection(data, alias)
    if cond == "TRUE" or not data.has("api"):
        return cond
    return (
        f"{cond} AND ({alias}.correlation_id IS NULL OR EXISTS (SELECT 1 FROM raw_api a_ "
        f"WHERE a_.rank = {alias}.rank AND a_.correlation_id = {alias}.correlation_id))"
    )


def scope_note(data: ProfileData) -> str:
    if selects_steps(data):
        return f"covers the events of the selected iterations ({data.selection.describe()})"
    return "covers the whole profile, as nsys does (choose iterations with --iter-start/--iter-stop or --key-node)"


def summary_sql(events_sql: str, count_column: str, keys: dict[str, str], order: str) -> str:
    """nsys's duration summary over ``events_sql`` (a column ``d``, a duration in ns, plus the key
    columns): one row per key, the statistics under nsys's column names, then the keys renamed by
    ``keys`` (events column -> output column)."""
    cols = ", ".join(keys)
    out_keys = ", ".join(f'per.{k} AS "{v}"' for k, v in keys.items())
    return f"""
    WITH ev AS ({events_sql}),
    per AS (
        SELECT {cols}, sum(d)::BIGINT AS total, count(*) AS n, sum(d)::DOUBLE / count(*) AS avg,
               quantile_cont(d, 0.5) AS med, min(d)::BIGINT AS mn, max(d)::BIGINT AS mx,
               coalesce(stddev_samp(d), 0.0) AS sd
        FROM ev GROUP BY {cols}),
    grand AS (SELECT sum(total)::DOUBLE AS g FROM per)
    SELECT per.total::DOUBLE * 100.0 / nullif(grand.g, 0) AS "Time (%)", per.total AS "Total Time (ns)",
           per.n AS "{count_column}", per.avg AS "Avg (ns)", per.med AS "Med (ns)", per.mn AS "Min (ns)",
           per.mx AS "Max (ns)", per.sd AS "StdDev (ns)", {out_keys}
    FROM per, grand
    ORDER BY {order}
    """


@dataclass(frozen=True)
class AnyOfReport(Report):
    """A report that runs when at least one of the tables in ``needs`` holds rows (the memory
    summaries need copies or sets, not both)."""

    def missing(self, data: ProfileData) -> str | None:
        if any(data.has(t) for t in self.needs):
            return None
        return f"the profile has no {' or '.join(self.needs)} data"


def memops_sql(data: ProfileData) -> str:
    """Copies and sets of the selected scope, one row each: (name, d = duration ns, bytes), named
    as nsys names the operations. Tables without rows are left out."""
    parts = []
    if data.has("memcpy"):
        parts.append(
            f"SELECT {memcpy_name_sql('m.copy_kind')} AS name, m.end_ns - m.start_ns AS d, m.bytes "
            f"FROM memcpy m WHERE {gpu_in_selection(data, 'm')}"
        )
    if data.has("memset"):
        parts.append(
            f"SELECT '{MEMSET_NAME}' AS name, m.end_ns - m.start_ns AS d, m.bytes "
            f"FROM memset m WHERE {gpu_in_selection(data, 'm')}"
        )
    return " UNION ALL ".join(parts)
