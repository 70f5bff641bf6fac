"""A fleet of profiles as Dask DataFrames, for fleets too large for one machine.

One partition per profile: each task reads that profile's Parquet file(s) of the table and its
own ``strings`` file, decodes the names there (ids are per profile, so decoding never needs a
shuffle) and adds the ``profile`` column. The result has the columns of ``dlscope sql`` over a
folder: the stored columns, the decoded names, and ``profile``. Workers read the files
themselves, so on several hosts the profiles must be on storage every worker sees (a shared
file system; see docs/fleet.md for object stores). Needs ``dask[dataframe]`` (the ``fleet``
extra), imported only here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..store.fleet import find_profiles
from ..store.schema import NAME_COLUMNS, TABLES_BY_NAME

if TYPE_CHECKING:
    import pandas as pd


def _dask() -> Any:
    try:
        import dask.dataframe as dd
    except ImportError:
        raise UsageError("reading a fleet with Dask needs dask[dataframe]: pip install 'dlscope[fleet]'") from None
    return dd


def read_table(spec: str | list[str], table: str) -> Any:
    """``table`` of every profile in a folder, a glob, or a list of profile paths, as one Dask
    DataFrame (one partition per profile) with names decoded and a ``profile`` column."""
    if table not in TABLES_BY_NAME or table == "strings":
        raise UsageError(f"unknown table {table!r}; tables: {', '.join(t for t in TABLES_BY_NAME if t != 'strings')}")
    dd = _dask()
    if isinstance(spec, str):
        paths = [str(p) for p in find_profiles(spec)[0]]
    else:
        paths = [str(p) for p in spec]
    meta = read_partition(None, table)
    return dd.from_map(read_partition, paths, table=table, meta=meta, enforce_metadata=False)


def read_partition(profile: str | None, table: str) -> pd.DataFrame:
    """One profile's ``table`` as pandas, decoded (``profile`` None: the empty frame that tells
    Dask the columns and types). Integer columns stay exact (pandas' nullable integers)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    spec = TABLES_BY_NAME[table]
    names = NAME_COLUMNS.get(table, {})
    if profile is None:
        t = spec.schema.empty_table()
        strings = pa.table({"id": pa.array([], pa.int32()), "value": pa.array([], pa.string())})
    else:
        root = Path(profile)
        files = sorted(root.glob(f"{table}.parquet")) + sorted(root.glob(f"{table}.rank*.parquet"))
        t = (
            pa.concat_tables([pq.read_table(f, columns=spec.column_names()).cast(spec.schema) for f in files])
            if files
            else spec.schema.empty_table()
        )
        strings = pq.read_table(root / "strings.parquet", columns=["id", "value"])
    for text, idcol in names.items():  # vectorized: position of each id among the strings, then take
        pos = pc.index_in(t.column(idcol), value_set=strings.column("id").cast(pa.int32()))
        t = t.append_column(text, strings.column("value").take(pos))
    t = t.append_column("profile", pa.array([profile or ""] * t.num_rows, pa.string()))
    return t.to_pandas(types_mapper=_pandas_types(pd, pa).get)


def _pandas_types(pd: Any, pa: Any) -> dict[Any, Any]:
    return {
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.string(): pd.StringDtype(),
    }
