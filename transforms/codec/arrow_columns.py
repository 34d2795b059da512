"""What the columnar encoder needs to know about Arrow columns, and when it must give up.

For a feature and a column type: is the column encoded column-wise (and why), and how are its
validity, list layout and values read without converting rows to Python objects. Every rule
here mirrors what :class:`example_codec.ExampleEncoder` does with ``batch.to_pylist()`` rows
(lists, dicts, None, ints, floats, str, bytes, Decimal, datetime, date, time); a type whose
Python form the rules do not cover raises :class:`Unsupported`, and the feature is encoded
per row instead.

Pure: pyarrow and numpy, no Beam, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

__all__ = [
    "Columns",
    "Unsupported",
    "binary_layout",
    "check_type",
    "decimal_values",
    "child_layout",
    "clock_values",
    "column_type",
    "decoded",
    "leaf_kind",
    "list_depth",
    "never_coerces",
    "numbers",
    "scaled_floats",
    "resolve",
    "take_rows",
    "temporal_values",
    "undict",
    "valid_mask",
]


class Unsupported(Exception):
    """This feature/column combination is encoded per row; the message says why."""


def leaf_kind(t: pa.DataType) -> str:
    """``int``, ``uint``, ``float``, ``bool``, ``text``, ``binary``, ``time`` (timestamps),
    ``date``, ``clock`` (time32/time64: times of day), ``decimal``, ``null`` or ``struct``
    (a dictionary type: that of its values); raises Unsupported for every other type (maps,
    intervals, durations, ...).

    Args:
        t: a leaf (non-list) Arrow type.

    Returns:
        The kind's name.

    Raises:
        Unsupported: a type the columnar path does not convert.
    """
    t = undict(t)
    if pa.types.is_signed_integer(t):
        return "int"
    if pa.types.is_unsigned_integer(t):
        return "uint"
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_timestamp(t):
        return "time"
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        return "date"
    if pa.types.is_time(t):
        return "clock"
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_struct(t):
        return "struct"
    raise Unsupported(f"values of type {t} are converted per row")


def is_list(t: pa.DataType) -> bool:
    """Whether ``t`` is a list type of any kind: variable, large or fixed-size.

    Args:
        t: an Arrow type.

    Returns:
        True for the three list types.
    """
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def undict(t: pa.DataType) -> pa.DataType:
    """The value type of a dictionary type, any other type as it is.

    Args:
        t: an Arrow type.

    Returns:
        The type values are decoded to.
    """
    return t.value_type if pa.types.is_dictionary(t) else t


def list_depth(t: pa.DataType) -> tuple[int, pa.DataType]:
    """(list levels, leaf type) of a column type, looking through dictionaries at every level
    (:func:`decoded` decodes them as the levels are walked).

    Args:
        t: a column's Arrow type.

    Returns:
        ``(depth, leaf type)``; depth 0 for a scalar column.
    """
    depth = 0
    t = undict(t)
    while is_list(t):
        depth += 1
        t = undict(t.value_type)
    return depth, t


def valid_mask(arr: pa.Array) -> np.ndarray:
    """Which slots of ``arr`` are not null.

    Args:
        arr: an Arrow array.

    Returns:
        A bool array, one per slot.
    """
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return ~arr.is_null().to_numpy(zero_copy_only=False)


def child_layout(arr: pa.Array, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts into ``arr.values``, counts) of the list slots ``idx`` of a list array.

    Args:
        arr: a list, large list or fixed-size list array.
        idx: the slots, int64.

    Returns:
        ``(starts, counts)``, int64.
    """
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return (arr.offset + idx) * size, np.full(idx.size, size, dtype=np.int64)
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    return offsets[idx], offsets[idx + 1] - offsets[idx]


def numbers(arr: pa.Array, idx: np.ndarray | None) -> np.ndarray:
    """The numbers at slots ``idx`` (None: all), nulls as zeros.

    Args:
        arr: a numeric or boolean array.
        idx: the slots to read; None for all.

    Returns:
        The values as a numpy array (float64 or int64 when empty).
    """
    if len(arr) == 0 or (idx is not None and idx.size == 0):
        return np.zeros(0, dtype=np.float64 if pa.types.is_floating(arr.type) else np.int64)
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
    values = arr.to_numpy(zero_copy_only=False)
    return values if idx is None else values[idx]


# What coercion.to_int64 does with the Python value to_pylist() makes of each row (a datetime,
# a pandas Timestamp for nanoseconds, a date): its microseconds since the epoch, floored, then
# the feature's unit -- floored again, or for "ns" the exact nanoseconds.
_MICROS_PER = {"s": 10**6, "ms": 10**3, "us": 1, "days": 86_400 * 10**6}
_DAY_MS = 86_400_000
# Python's datetime range (years 1 to 9999) in microseconds from the epoch: to_pylist() of a
# value outside it raises, so such a batch is left to the row path, which fails alike.
_MIN_MICROS = -62_135_596_800 * 10**6
_MAX_MICROS = 253_402_300_799 * 10**6 + 999_999


def temporal_values(arr: pa.Array, idx: np.ndarray | None, unit: str
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(values in ``unit`` as int64, rows out of the int64 range) of the timestamp or date
    slots ``idx`` (None: all), nulls as zeros -- what the row path gets from each value.

    Args:
        arr: a timestamp or date array.
        idx: the slots to read; None for all.
        unit: the feature's unit (``s``, ``ms``, ``us``, ``ns``, ``days``).

    Returns:
        ``(values, out_of_range)``: int64 values and a bool per slot.
    """
    t = arr.type
    if pa.types.is_date32(t) or pa.types.is_date64(t):
        raw = numbers(arr.cast(pa.int32() if pa.types.is_date32(t) else pa.int64()), idx)
        days = raw.astype(np.int64)
        if pa.types.is_date64(t):
            days = np.floor_divide(days, _DAY_MS)  # to_pylist() gives the day it falls in
        micros, rest = days * _MICROS_PER["days"], np.zeros(days.size, np.int64)
    else:
        raw = numbers(arr.cast(pa.int64()), idx).astype(np.int64)
        if t.unit == "ns":
            micros, rest = np.divmod(raw, 1000)
        else:
            scale = _MICROS_PER[t.unit]
            if raw.size and (np.abs(raw).max() > _MAX_MICROS // scale):
                raise Unsupported("a timestamp outside the years 1 to 9999")
            micros, rest = raw * scale, np.zeros(raw.size, np.int64)
    if micros.size and (micros.min() < _MIN_MICROS or micros.max() > _MAX_MICROS):
        raise Unsupported("a timestamp outside the years 1 to 9999")
    if unit == "ns":
        limit = (2**63 - 1 - 999) // 1000
        overflow = np.abs(micros) > limit
        safe = np.where(overflow, 0, micros)
        return safe * 1000 + rest, overflow
    return np.floor_divide(micros, _MICROS_PER[unit]), np.zeros(micros.size, dtype=bool)


# time32/time64 units per day, and the microseconds of one unit (what to_pylist() keeps of a
# time64[ns] value: a datetime.time, its nanoseconds dropped).
_CLOCK_PER_DAY = {"s": 86_400, "ms": 86_400 * 10**3, "us": 86_400 * 10**6,
                  "ns": 86_400 * 10**9}


def clock_values(arr: pa.Array, idx: np.ndarray | None, unit: str) -> np.ndarray:
    """Times of day (time32/time64) at slots ``idx`` (None: all) since midnight in ``unit``
    as int64, nulls as zeros -- what coercion.to_int64 makes of the ``datetime.time`` that
    to_pylist() gives: microseconds (a time64[ns] value truncated to them), floored to the
    unit. A value outside one day (which to_pylist() wraps or refuses) is left to the row
    path.

    Args:
        arr: a time32 or time64 array.
        idx: the slots to read; None for all.
        unit: the feature's unit (``s``, ``ms``, ``us``, ``ns``).

    Returns:
        The values, int64.

    Raises:
        Unsupported: a value outside one day.
    """
    t = arr.type
    raw = numbers(arr.cast(pa.int32() if pa.types.is_time32(t) else pa.int64()), idx
                  ).astype(np.int64)
    if raw.size and (raw.min() < 0 or raw.max() >= _CLOCK_PER_DAY[t.unit]):
        raise Unsupported(f"{t}: a time of day outside 00:00 to 24:00")
    micros = raw // 1000 if t.unit == "ns" else raw * _MICROS_PER[t.unit]
    if unit == "ns":
        return micros * 1000
    return micros // _MICROS_PER[unit]


def decimal_values(arr: pa.Array, idx: np.ndarray | None, dtype: str, scale: int = 0
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(values, rows refused) of the decimal slots ``idx`` (None: all), nulls as zeros, as the
    row path gets them from each ``Decimal``: for ``float`` the nearest double, for ``int64``
    the value times ``10**scale`` (the feature's scale) when that is a whole number in range
    (otherwise refused).

    Exact where it is cheap to be: the unscaled integer must fit 53 bits for a float (then
    one IEEE division by an exact power of ten rounds as ``float(Decimal)`` does) and 63 bits
    for an int64, whose power of ten (the feature's scale less the column's) must be within
    18 either way; anything else is left to the row path.

    Args:
        arr: a decimal128 or decimal256 array.
        idx: the slots to read; None for all.
        dtype: the feature's type, ``float`` or ``int64``.
        scale: the feature's decimal scale (``int64`` only).

    Returns:
        ``(values, refused)``: float64 or int64 values, and a bool per slot.

    Raises:
        Unsupported: a scale or a size left to the row path.
    """
    t = arr.type
    shift = scale - t.scale  # int64: the stored integer is the unscaled one times 10**shift
    if t.scale < 0 or (t.scale > 22 if dtype == "float" else not -18 <= shift <= 18):
        raise Unsupported(f"{t}: a scale the columnar path does not convert")
    words = 2 if pa.types.is_decimal128(t) else 4
    buffer = arr.buffers()[1]
    raw = (np.frombuffer(buffer, dtype="<i8").reshape(-1, words)[arr.offset:arr.offset + len(arr)]
           if buffer is not None else np.zeros((0, words), np.int64))
    low = raw[:, 0]
    valid = valid_mask(arr)
    fits = np.all(raw[:, 1:] == (low >> 63)[:, None], axis=1) | ~valid
    if not fits.all():
        raise Unsupported(f"{t}: a value wider than 64 bits")
    unscaled = np.where(valid, low, 0)
    if idx is not None:
        unscaled = unscaled[idx]
    if dtype == "float":
        if unscaled.size and np.abs(unscaled).max() > 2**53:
            raise Unsupported(f"{t}: a value wider than a double's 53 bits")
        return unscaled.astype(np.float64) / 10.0 ** t.scale, np.zeros(unscaled.size, bool)
    if shift > 0:
        limit = (2**63 - 1) // 10**shift  # symmetric: 10**shift never divides 2**63
        over = (unscaled > limit) | (unscaled < -limit)
        return np.where(over, 0, unscaled) * 10**shift, over
    whole, rest = np.divmod(unscaled, 10**-shift)
    return whole, rest != 0


# Below 2**50 a float times 10**k lands within 1/4 of the decimal's integer and that integer
# over 10**k rounds back to exactly one double; past it two decimals may share a double.
_EXACT_SCALED = 2.0**50
# Far enough past 2**63 that no value the row path accepts rounds there.
_SURELY_OUT_OF_RANGE = 2.0**64


def scaled_floats(values: np.ndarray, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, rows refused) of floats times ``10**scale``, as the row path computes
    them: a float is the decimal it is written as (its shortest round-trip form), so 12.34
    with scale 2 is 1234 though the double is 12.3399999...; NaN, infinities, values with
    more than ``scale`` decimal places and values far outside the int64 range are refused.

    The test is exact for magnitudes under 2**50 once scaled: ``d = rint(x * 10**k)`` is the
    decimal's integer when there is one, and ``d / 10**k == x`` (one correctly rounded
    division by an exact power of ten) holds exactly when that decimal rounds to ``x``,
    which is when its shortest form has at most k places. Between 2**50 and 2**64 this
    raises :class:`Unsupported`: the batch's feature goes per row, exactly.

    Args:
        values: float64 (or float32) numbers, NaN and infinities included.
        scale: the feature's decimal scale.

    Returns:
        ``(values, refused)``: int64 values and a bool per value.

    Raises:
        Unsupported: a value between 2**50 and 2**64 once scaled.
    """
    values = values.astype(np.float64, copy=False)
    power = 10.0**scale
    with np.errstate(invalid="ignore", over="ignore"):
        whole = np.rint(values * power)
        size = np.abs(whole)
        finite = np.isfinite(values)
        if (finite & (size >= _EXACT_SCALED) & (size < _SURELY_OUT_OF_RANGE)).any():
            raise Unsupported(f"a float times 10**{scale} at 2**50 or more: converted per "
                              "row, exactly")
        exact = finite & (size < _EXACT_SCALED) & (whole / power == values)
    return np.where(exact, whole, 0.0).astype(np.int64), ~exact


def binary_layout(arr: pa.Array, idx: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data buffer, starts, lengths) of the string/binary slots ``idx`` (None: all).

    Args:
        arr: a string, binary (large or fixed-size too) array.
        idx: the slots; None for all.

    Returns:
        The uint8 data buffer and, per slot, its start in it and its length (int64).
    """
    if idx is None:
        idx = np.arange(len(arr), dtype=np.int64)
    buffers = arr.buffers()
    if pa.types.is_fixed_size_binary(arr.type):
        width = arr.type.byte_width
        data = np.frombuffer(buffers[1], dtype=np.uint8) if buffers[1] else np.zeros(0, np.uint8)
        return data, (arr.offset + idx) * width, np.full(idx.size, width, dtype=np.int64)
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = np.frombuffer(buffers[1], dtype=np.int64 if wide else np.int32)[
        arr.offset:arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] else np.zeros(0, np.uint8)
    return data, offsets[idx], offsets[idx + 1] - offsets[idx]


def _fixed_in_fixed(t: pa.DataType) -> bool:
    """A fixed_size_list whose values are fixed_size_lists, anywhere in ``t``."""
    t = undict(t)
    if pa.types.is_fixed_size_list(t) and pa.types.is_fixed_size_list(undict(t.value_type)):
        return True
    if is_list(t):
        return _fixed_in_fixed(t.value_type)
    if pa.types.is_struct(t):
        return any(_fixed_in_fixed(t.field(i).type) for i in range(t.num_fields))
    return False


def take_rows(batch: pa.RecordBatch, rows: pa.Array) -> pa.RecordBatch:
    """``batch.take(rows)``, around an Arrow bug (pyarrow 25): ``take`` (and ``filter``) of a
    *sliced* fixed_size_list of fixed_size_lists reads the values of the unsliced rows
    (``[[[1], [2]], [[3], [4]]]`` sliced from row 1 takes ``[[1], [2]]`` for row 0). Such
    columns are copied to offset 0 first.

    Args:
        batch: the records, column-wise; may be a slice.
        rows: the row indices to take, in order.

    Returns:
        The rows taken.
    """
    columns = [pa.concat_arrays([c]) if c.offset and _fixed_in_fixed(c.type) else c
               for c in batch.columns]
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema).take(rows)


def decoded(arr: pa.Array) -> pa.Array:
    """One array, dictionary-decoded: what the columnar encoders read values from.

    Args:
        arr: an array or chunked array.

    Returns:
        A plain array.
    """
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


class Columns:
    """The top-level columns of one schema by name: its names are read once, here, and each
    lookup is a dict's -- so planning ``n`` features over a batch of ``n`` columns is O(n)
    work, not a scan of every name per feature.

    Args:
        schema: the batches' schema.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._index: dict[str, int] = {}
        self.repeated = False
        for at, name in enumerate(schema.names):
            if self._index.setdefault(name, at) != at:
                self.repeated = True

    def find(self, name: str) -> int | None:
        """The index of the column ``name`` (the first, if repeated), or None.

        Args:
            name: a top-level column name.

        Returns:
            Its index, or None when absent.
        """
        return self._index.get(name)


def resolve(columns: Columns, path: Sequence[str]) -> tuple[str, Any]:
    """How ``lookup(record, path)`` finds its value in rows of ``columns.schema``.

    (``"absent"``, None): every row is missing; (``"column"``, [index, child indices...]): a
    top-level column and struct fields below it; raises Unsupported otherwise. Each step is
    one lookup by name (a struct type's own index of its fields below the top level).

    Args:
        columns: the batch's columns.
        path: the feature's source path (field names, outermost first).

    Returns:
        ``(how, where)`` as above.

    Raises:
        Unsupported: the path goes through something other than structs, or names repeat.
    """
    if columns.repeated:
        raise Unsupported("the batch repeats a column name")
    first = columns.find(path[0])
    if first is None:
        if len(path) > 1:
            for joined in (".".join(path), "/".join(path)):
                at = columns.find(joined)
                if at is not None:
                    return "column", [at]
        return "absent", None
    steps: list[Any] = [first]
    if len(path) == 1:
        return "column", steps
    t = columns.schema.field(first).type
    for part in path[1:]:
        if pa.types.is_dictionary(t) or not pa.types.is_struct(t):
            raise Unsupported(f"source path {'.'.join(path)!r} goes through a {t} value")
        child = t.get_field_index(part)  # -1: absent, or more than one field of that name
        if child < 0:
            raise Unsupported(f"source path {'.'.join(path)!r}: struct field {part!r} is "
                              "absent or repeated")
        steps.append(child)
        t = t.field(child).type
    return "column", steps


def column_type(schema: pa.Schema, steps: list) -> pa.DataType:
    """The type at ``steps`` (a :func:`resolve` column: top-level index, then struct field indices).

    Args:
        schema: the batch's schema.
        steps: the column's index, then each struct field's index below it.

    Returns:
        The Arrow type found there.
    """
    t = schema.field(steps[0]).type
    for i in steps[1:]:
        t = t.field(i).type
    return t


def check_type(spec: FeatureSpec, t: pa.DataType) -> str:
    """Why a column of type ``t`` is columnar for ``spec``; raises Unsupported if it is not.

    Args:
        spec: the feature the column is encoded into.
        t: the column's Arrow type.

    Returns:
        The reason, for the plan's explanation.

    Raises:
        Unsupported: the column is converted per row.
    """
    t = undict(t)
    depth, leaf = list_depth(t)
    kind = leaf_kind(leaf)  # raises for the types converted per row
    if kind == "text" and (spec.dtype == "float" or (spec.dtype == "int64"
                                                     and spec.format is None)):
        # Number text (a BigQuery STRING column, Beam YAML's text fields) follows the rules
        # of a CSV cell, which the per-row coercion applies (text_values.int64_text).
        raise Unsupported(f"{t} into {spec.dtype}: number text is parsed per row")
    # Any depth: rows nested unlike the shape are rejected, as the row path's walk rejects
    # them (one level for several dimensions: the values already flat).
    if not spec.shape and depth:
        return f"{t} into a scalar: every present value is rejected"
    if spec.shape and not depth:
        return f"{t} into shape {list(spec.shape)}: every present value is rejected"
    return f"{t} -> {spec.dtype}" + (f" of shape {list(spec.shape)}" if spec.shape else "")


def never_coerces(spec: FeatureSpec, kind: str) -> bool:
    """True when no value of this leaf kind passes the coercion policy for ``spec``.

    Args:
        spec: the feature the column is encoded into.
        kind: the column's :func:`leaf_kind`.

    Returns:
        Whether every present value is rejected.
    """
    if kind in ("struct", "null"):
        return True
    if spec.dtype == "int64":  # decimals: whole ones pass; text: numbers and dates
        return kind == "binary"
    if spec.dtype == "float":  # text: numbers (check_type sends it per row)
        return kind in ("binary", "bool", "time", "date", "clock")
    return kind in ("int", "uint", "float", "bool", "time", "date", "clock", "decimal")
