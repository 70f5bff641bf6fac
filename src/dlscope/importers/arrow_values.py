"""Python values read from a foreign file (SQLite rows, protobuf varints, CSV numbers) as Arrow
arrays of the schema's types.

A damaged or foreign file can hold any value where a column expects one type: SQLite keeps each
value's own type, a flipped byte makes a step number a 63-bit varint. The format's value rule
(``schema.VALUE_RULE``, docs/format.md) says what each becomes: a value the type cannot hold is
NULL (and the builder drops a row that loses a required value), bytes in a text column are read
as UTF-8 with U+FFFD for what is not, and a number in a text column is its digits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow loads when a file is read, not with the command line
    import pyarrow as pa


def typed_array(values: Sequence[Any], type_: pa.DataType | None) -> pa.Array:
    """``values`` as an Arrow array of ``type_`` (inferred where None), each value ``type_``
    cannot hold made what :func:`fitted` says. Converts at Arrow's speed when every value fits."""
    import pyarrow as pa

    if type_ is None:
        return pa.array(values)
    try:
        return pa.array(values, type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([fitted(v, type_) for v in values], type_)


def fitted(v: Any, type_: pa.DataType) -> Any:
    """One value as ``type_`` holds it: an integer within the type's range (an integral float
    counts), a float, a text; anything else None."""
    import pyarrow as pa

    if v is None:
        return None
    if pa.types.is_integer(type_):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            return None
        signed = pa.types.is_signed_integer(type_)
        bits = type_.bit_width - (1 if signed else 0)
        return v if (-(1 << bits) if signed else 0) <= v < (1 << bits) else None
    if pa.types.is_floating(type_):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        return v if isinstance(v, str) else str(v)
    if pa.types.is_boolean(type_):
        return v if isinstance(v, bool) else None
    return None
