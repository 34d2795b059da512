"""``beam-tfrecords init``'s inference: features from Arrow types and sample statistics.

Pure over Arrow types and counts (no I/O): what each column becomes -- type, list shape,
missing policy, unit for timestamps and dates -- or why it has no feature type. Reading the
sample is ``pipelines/init_config.py``'s business, writing the config text
``pipelines/init_render.py``'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.errors import UserError

__all__ = ["Column", "InitError", "features_from_arrow"]

_UNITS = {"s": "s", "ms": "ms", "us": "us", "ns": "ns"}


class InitError(UserError):
    """An input ``init`` cannot describe; one line."""


@dataclasses.dataclass
class Column:
    """One feature to write: its name, source path, type, shape, missing policy, unit and a
    comment; ``skip`` holds why a column became a comment instead."""

    name: str
    source: tuple[str, ...]
    dtype: str = ""
    shape: tuple[int, ...] = ()
    missing: str = "error"
    unit: str = ""
    note: str = ""
    skip: str = ""


def _leaf(pa: Any, t: Any, text_times: bool) -> tuple[str, str, str] | str:
    """(dtype, unit, note) of a scalar Arrow type, or the reason it has no feature type."""
    types = pa.types
    if types.is_dictionary(t):
        return _leaf(pa, t.value_type, text_times)
    if getattr(t, "extension_name", None) == "arrow.uuid":  # Parquet's UUID
        return "string", "", "uuid -> its canonical text"
    if types.is_boolean(t):
        return "int64", "", "true/false -> 1/0"
    if types.is_integer(t):
        note = "values above 2**63-1 are rejected" if t == pa.uint64() else ""
        return "int64", "", note
    if types.is_floating(t):
        return "float", "", ""
    if types.is_decimal(t):
        if 0 < t.scale <= 18 and t.precision <= 18:  # every value fits an int64 once scaled
            return "float", "", (f"decimal -> float32; {{type: int64, scale: {t.scale}}} "
                                 "would store it exactly")
        return "float", "", "decimal -> float32"
    if types.is_string(t) or types.is_large_string(t):
        return "string", "", ""
    if types.is_binary(t) or types.is_large_binary(t) or types.is_fixed_size_binary(t):
        return "bytes", "", ""
    if types.is_timestamp(t):
        if text_times:  # the cells decide (_date_text)
            return "string", "", "date-time text, kept as text"
        zone = f", time zone {t.tz}" if t.tz else ""
        return "int64", _UNITS[t.unit], f"timestamp{zone} -> {t.unit} since 1970-01-01 UTC"
    if types.is_date(t):
        if text_times:
            return "string", "", "date text, kept as text"
        return "int64", "days", "date -> days since 1970-01-01"
    if types.is_time(t):
        if text_times:  # our readers keep it as text, which no unit parses
            return "a time of day has no feature type"
        unit = "us" if t.unit == "ns" else _UNITS[t.unit]  # datetime.time holds no ns
        return "int64", unit, f"time of day -> {unit} since midnight"
    if types.is_null(t):
        return "always missing in the sample"
    if types.is_map(t):
        return "a map has no feature type (flatten it to columns first)"
    return f"{t} has no feature type"


def _list_shape(pa: Any, t: Any) -> tuple[tuple[int, ...], Any]:
    """The shape of a (nested) list type and its element type."""
    shape: list[int] = []
    while pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        shape.append(-1)
        t = t.value_type
    return tuple(shape), t


def features_from_arrow(pa: Any, schema: Any, nulls: Mapping[str, int], *,
                        text_times: bool = False) -> list[Column]:
    """The columns of an Arrow ``schema``, in its order, nested fields flattened.

    Args:
        pa: the ``pyarrow`` module (imported by the caller, so this module imports nothing).
        schema: the sample's Arrow schema.
        nulls: a dotted field path -> how many of its values are missing (absent: none seen).
        text_times: timestamps and dates came from text (CSV), which our readers keep as text.

    Returns:
        One :class:`Column` per leaf field: a feature, or ``skip`` saying why it is none.
    """
    out: list[Column] = []

    def visit(field: Any, path: tuple[str, ...], parent_missing: bool) -> None:
        dotted = ".".join(path)
        missing = parent_missing or nulls.get(dotted, 0) > 0
        t = field.type
        if pa.types.is_struct(t):
            for child in t:
                visit(child, path + (child.name,), missing)
            return
        shape, element = _list_shape(pa, t)
        name = "_".join(path)
        if "" in path:  # pandas' to_csv writes its index under an empty header
            out.append(Column(name, path, skip="no name in the header (as pandas writes "
                                               "its index): a source cannot name it"))
            return
        if pa.types.is_struct(element):
            out.append(Column(name, path, skip="a list of records has no feature type"))
            return
        leaf = _leaf(pa, element, text_times)
        if isinstance(leaf, str):
            out.append(Column(name, path, skip=leaf))
            return
        dtype, unit, note = leaf
        out.append(Column(name, path, dtype, shape, "omit" if missing else "error", unit,
                          note))

    for field in schema:
        visit(field, (field.name,), False)
    return out
