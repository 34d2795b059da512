"""What the columnar encoder needs to know about Arrow columns, and when it must give up.

For a feature and a column type: is the column encoded column-wise (and why), and how are its
validity, list layout and values read without converting rows to Python objects. Every rule
here mirrors what :class:`example_codec.ExampleEncoder` does with ``batch.to_pylist()`` rows
(lists, dicts, None, ints, floats, str, bytes); a type whose Python form the rules do not
cover raises :class:`Unsupported`, and the feature is encoded per row instead.

Pure: pyarrow and numpy, no Beam, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

__all__ = [
    "Unsupported",
    "binary_layout",
    "check_type",
    "child_layout",
    "column_type",
    "decoded",
    "leaf_kind",
    "list_depth",
    "never_coerces",
    "numbers",
    "resolve",
    "valid_mask",
]


class Unsupported(Exception):
    """This feature/column combination is encoded per row; the message says why."""


def leaf_kind(t: pa.DataType) -> str:
    """``int``, ``uint``, ``float``, ``bool``, ``text``, ``binary``, ``null`` or ``struct``;
    raises Unsupported for every other type (timestamps, dates, decimals, maps, ...)."""
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
    if pa.types.is_null(t):
        return "null"
    if pa.types.is_struct(t):
        return "struct"
    raise Unsupported(f"values of type {t} are converted per row")


def is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def list_depth(t: pa.DataType) -> tuple[int, pa.DataType]:
    depth = 0
    while is_list(t):
        depth += 1
        t = t.value_type
    return depth, t


def valid_mask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return ~arr.is_null().to_numpy(zero_copy_only=False)


def child_layout(arr: pa.Array, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts into ``arr.values``, counts) of the list slots ``idx`` of a list array."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return (arr.offset + idx) * size, np.full(idx.size, size, dtype=np.int64)
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    return offsets[idx], offsets[idx + 1] - offsets[idx]


def numbers(arr: pa.Array, idx: np.ndarray | None) -> np.ndarray:
    """The numbers at slots ``idx`` (None: all), nulls as zeros."""
    if len(arr) == 0 or (idx is not None and idx.size == 0):
        return np.zeros(0, dtype=np.float64 if pa.types.is_floating(arr.type) else np.int64)
    if arr.null_count:
        arr = arr.fill_null(False if pa.types.is_boolean(arr.type) else 0)
    values = arr.to_numpy(zero_copy_only=False)
    return values if idx is None else values[idx]


def binary_layout(arr: pa.Array, idx: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(data buffer, starts, lengths) of the string/binary slots ``idx`` (None: all)."""
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


def decoded(arr: pa.Array) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def resolve(schema: pa.Schema, path: Sequence[str]) -> tuple[str, Any]:
    """How ``lookup(record, path)`` finds its value in rows of ``schema``.

    (``"absent"``, None): every row is missing; (``"column"``, [index, child names...]): a
    top-level column and struct fields below it; raises Unsupported otherwise.
    """
    names = schema.names
    if len(set(names)) != len(names):
        raise Unsupported("the batch repeats a column name")
    first = path[0]
    if first not in names:
        if len(path) > 1:
            for joined in (".".join(path), "/".join(path)):
                if joined in names:
                    return "column", [names.index(joined)]
        return "absent", None
    steps: list[Any] = [names.index(first)]
    t = schema.field(first).type
    for part in path[1:]:
        if pa.types.is_dictionary(t) or not pa.types.is_struct(t):
            raise Unsupported(f"source path {'.'.join(path)!r} goes through a {t} value")
        child_names = [t.field(i).name for i in range(t.num_fields)]
        if child_names.count(part) != 1:
            raise Unsupported(f"source path {'.'.join(path)!r}: struct field {part!r} is "
                               "absent or repeated")
        steps.append(child_names.index(part))
        t = t.field(child_names.index(part)).type
    return "column", steps


def column_type(schema: pa.Schema, steps: list) -> pa.DataType:
    t = schema.field(steps[0]).type
    for i in steps[1:]:
        t = t.field(i).type
    return t


def check_type(spec: FeatureSpec, t: pa.DataType) -> str:
    """Why a column of type ``t`` is columnar for ``spec``; raises Unsupported if it is not."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    depth, leaf = list_depth(t)
    leaf_kind(leaf)  # raises for the types converted per row
    if spec.shape and depth not in (0, 1, len(spec.shape)):
        raise Unsupported(f"a {depth}-level list column for shape {list(spec.shape)}")
    if not spec.shape and depth:
        return f"{t} into a scalar: every present value is rejected"
    if spec.shape and not depth:
        return f"{t} into shape {list(spec.shape)}: every present value is rejected"
    return f"{t} -> {spec.dtype}" + (f" of shape {list(spec.shape)}" if spec.shape else "")


def never_coerces(spec: FeatureSpec, kind: str) -> bool:
    """True when no value of this leaf kind passes the coercion policy for ``spec``."""
    if kind in ("struct", "null"):
        return True
    if spec.dtype == "int64":
        return kind in ("text", "binary")
    if spec.dtype == "float":
        return kind in ("text", "binary", "bool")
    return kind in ("int", "uint", "float", "bool")
