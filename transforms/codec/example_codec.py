"""Records -> serialized Examples, and back, driven by :class:`FeatureSpec` s.

:class:`ExampleEncoder` is the per-record path: it looks up each feature's source field,
applies the missing-value policy, checks and flattens the shape, coerces every element by the
policy in :mod:`coercion` and writes deterministic wire bytes with :mod:`wire`. Any problem
raises :class:`FeatureValueError` naming the feature, the value, its type and what was expected;
callers add the record's origin. :class:`ExampleDecoder` turns bytes back into Python and numpy
values of the declared shapes, for tests, ``inspect`` and ``verify``.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.coercion import (
    FLOAT32_OVERFLOW,
    INT64_MAX,
    FeatureValueError,
    element_coercer,
    is_missing,
)
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

__all__ = ["ExampleDecoder", "ExampleEncoder", "describe", "lookup"]

_ABSENT = object()


def describe(spec: FeatureSpec) -> str:
    """What a feature expects, for messages: ``int64``, ``float of shape [28, 28]``.

    Args:
        spec: the feature, by its type and shape.

    Returns:
        A short description.
    """
    what = spec.dtype if not spec.shape else f"{spec.dtype} of shape {list(spec.shape)}"
    return f"a sequence of steps of {what}" if spec.sequence else what


def lookup(record: Mapping[str, Any], path: Sequence[str]) -> Any:
    """The value at ``path`` in a (nested) record, or None when absent.

    A literal key spelled with dots or slashes (a CSV column ``meta.label``) is found too.

    Args:
        record: the record (nested mappings).
        path: field names, outermost first.

    Returns:
        The value, or None.

    Raises:
        FeatureValueError: a step of the path is neither a mapping nor None.
    """
    value: Any = record
    for depth, part in enumerate(path):
        if isinstance(value, Mapping):
            value = value.get(part, _ABSENT)
            if value is _ABSENT:
                break
        elif value is None:
            return None
        else:
            raise FeatureValueError(
                ".".join(path), value, f"a record at {'.'.join(path[:depth])!r}",
                "cannot look up a field inside a non-record value",
            )
    else:
        return value
    if len(path) > 1:
        for joined in (".".join(path), "/".join(path)):
            if joined in record:
                return record[joined]
    return None


def _is_listlike(value: Any) -> bool:
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _int64_as_is(value: int) -> int | None:
    return value if -(2**63) <= value < 2**63 else None


def _utf8(value: str) -> bytes | None:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the general path says why
        return None


# Map entries a feature keeps for reuse, and the longest text or bytes value kept.
_ENTRY_CACHE, _CACHED_TEXT = 4096, 64
# dtype -> (the exact Python type taken as is, its stored value or None for the general path)
_FAST_SCALARS = {"int64": (int, _int64_as_is), "bytes": (bytes, lambda value: value),
                 "string": (str, _utf8)}


class _FeaturePlan:
    """One feature's compiled encoding: lookup, missing policy, shape, coercion."""

    def __init__(self, spec: FeatureSpec) -> None:
        self.spec = spec
        self.expected = describe(spec)
        self._coerce = element_coercer(spec.dtype, spec.name, spec.unit, spec.nan,
                                        spec.format, spec.scale)
        # Scalars of the one type that needs no coercion (an int for int64, bytes for bytes, a
        # str for string) skip the shape walk and the coercion ladder: an image's label,
        # height and width, its bytes. An int is stored as is whatever the unit or format
        # (they read dates and text); a scale multiplies it, so it takes the general path, as
        # does anything else -- bool, numpy, out of range, a bad surrogate -- whose bytes
        # these equal.
        self._fast = (None if spec.shape or spec.sequence or spec.scale
                      else _FAST_SCALARS.get(spec.dtype))
        self._default: list[tuple[str, Any]] | None = None
        if spec.missing == "default":
            # Encoding the default now validates it: a bad default is a config error.
            self._default = self.encode_value(spec.default)
        elif spec.missing == "empty":
            self._default = self.empty_items()

        # Serialized map entries of small scalars seen before (a label, a height): most
        # records repeat a few values, and an entry is the same bytes whenever its value is.
        self._entries: dict[Any, tuple[list[bytes], int]] = {}
        self.single = not spec.sequence and not spec.ragged_dims  # one map entry, or none

    def fail(self, value: Any, reason: str) -> FeatureValueError:
        return FeatureValueError(self.spec.name, value, self.expected, reason)

    def entry(self, record: Mapping[str, Any]) -> tuple[list[bytes], int] | None:
        """For a :attr:`single` plan: the record's map entry as pieces and their size, or
        None when the feature is left out (``missing: omit``); exactly what :meth:`items`
        gives, serialized by ``wire``."""
        spec = self.spec
        value = lookup(record, spec.source)
        fast = self._fast
        if fast is not None and type(value) is fast[0]:
            # never hash a long value (an image's bytes) to look it up
            cacheable = type(value) is int or len(value) <= _CACHED_TEXT
            known = self._entries.get(value) if cacheable else None
            if known is not None:
                return known
            stored = fast[1](value)
            if stored is not None:
                entry = wire.entry_pieces(spec.values_key,
                                          wire.feature_pieces(spec.kind, (stored,)))
                if cacheable and len(self._entries) < _ENTRY_CACHE:
                    self._entries[value] = entry
                return entry
        items = self.items(record)
        if not items:
            return None
        ((key, feature),) = items
        return wire.entry_pieces(key, feature)

    def items(self, record: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """(stored key, serialized Feature as pieces, or list of step Features) pairs for a
        record."""
        spec = self.spec
        value = lookup(record, spec.source)
        if not is_missing(value) and not (
            spec.nan == "missing" and isinstance(value, (float, np.floating)) and math.isnan(value)
        ):
            return self.encode_value(value)
        if spec.missing == "omit":
            return []
        if spec.missing in ("default", "empty"):
            return self._default  # type: ignore[return-value]
        raise self.fail(value, f"no value at source {'.'.join(spec.source)!r}; the "
                               "feature is required (missing: error)")

    def empty_items(self) -> list[tuple[str, Any]]:
        """What ``missing: empty`` stores: every key of the feature, present with no values
        (a sequence feature: a feature list of no steps)."""
        spec = self.spec
        if spec.sequence:
            return [(spec.name, [])]
        return [(spec.values_key, wire.feature_pieces(spec.kind, [])), *(
            (spec.row_lengths_key(dim), wire.feature_pieces("int64_list", []))
            for dim in spec.ragged_dims)]

    def encode_value(self, value: Any) -> list[tuple[str, Any]]:
        spec = self.spec
        fast = self._fast
        if fast is not None and type(value) is fast[0]:
            stored = fast[1](value)
            if stored is not None:
                return [(spec.values_key, wire.feature_pieces(spec.kind, (stored,)))]
        if spec.sequence:
            if not _is_listlike(value):
                raise self.fail(value, "a sequence feature needs a list of steps")
            steps = []
            for index, step in enumerate(value):
                flat, _ = self._flatten(step)
                steps.append(wire.encode_feature(spec.kind, self._coerce_all(flat, step_=index)))
            return [(spec.name, steps)]
        flat, lengths = self._flatten(value)
        out = [(spec.values_key, wire.feature_pieces(spec.kind, self._coerce_all(flat)))]
        for dim in spec.ragged_dims:
            out.append((spec.row_lengths_key(dim), wire.feature_pieces("int64_list", lengths[dim])))
        return out

    # -- shapes -------------------------------------------------------------------------------

    def _flatten(self, value: Any) -> tuple[Any, dict[int, list[int]]]:
        """Flat row-major values and, per ragged dimension, the row lengths."""
        shape = self.spec.shape
        if not shape:
            if _is_listlike(value):
                raise self.fail(value, "a list where a single value belongs")
            if isinstance(value, np.ndarray):  # 0-d array
                value = value[()]
            return [value], {}
        if not _is_listlike(value):
            raise self.fail(value, "a single value where a list belongs")
        if isinstance(value, np.ndarray) and value.dtype != object and not self.spec.is_ragged:
            return self._flatten_array(value), {}
        inner = shape[1:]
        if not self.spec.is_ragged and len(shape) > 1 and value is not None and (
            len(value) == 0 or not _is_listlike(value[0])
        ):
            # Already flat: accepted when it holds a whole number of rows.
            row = math.prod(inner)
            if len(value) % row or (shape[0] != -1 and len(value) != math.prod(shape)):
                raise self.fail(value, f"{len(value)} flat values do not fill shape {list(shape)}")
            return list(value), {}
        leaves: list[Any] = []
        lengths: dict[int, list[int]] = {dim: [] for dim in self.spec.ragged_dims}
        self._walk(value, 0, leaves, lengths, value)
        return leaves, lengths

    def _walk(self, node: Any, dim: int, leaves: list, lengths: dict, whole: Any) -> None:
        shape = self.spec.shape
        if dim == len(shape):
            if _is_listlike(node):
                raise self.fail(whole, f"nested deeper than shape {list(shape)}")
            leaves.append(node)
            return
        if not _is_listlike(node):
            raise self.fail(whole, f"dimension {dim} of shape {list(shape)} needs a list, "
                                   f"found {type(node).__name__} {node!r:.40}")
        size = len(node)
        if shape[dim] != -1 and size != shape[dim]:
            raise self.fail(whole, f"dimension {dim} has length {size}, shape {list(shape)} "
                                   f"needs {shape[dim]}")
        if dim in lengths:
            lengths[dim].append(size)
        for child in node:
            self._walk(child, dim + 1, leaves, lengths, whole)

    def _flatten_array(self, array: np.ndarray) -> np.ndarray:
        shape = self.spec.shape
        inner = shape[1:]
        if array.shape == shape or (
            -1 in shape[:1] and array.ndim == len(shape) and array.shape[1:] == inner
        ):
            return array.reshape(-1)
        row = math.prod(inner) if inner else 1
        if array.ndim == 1 and array.size % row == 0 and (
            shape[0] == -1 or array.size == math.prod(shape)
        ):
            return array
        raise self.fail(array, f"array of shape {list(array.shape)} does not fit shape "
                               f"{list(shape)}")

    # -- elements -----------------------------------------------------------------------------

    def _coerce_all(self, flat: Any, step_: int | None = None) -> Any:
        if isinstance(flat, np.ndarray) and flat.dtype != object:
            fast = self._coerce_array(flat)
            if fast is not None:
                return fast
            flat = flat.tolist() if flat.dtype.kind not in "SUM" else list(flat)
        out = []
        coerce = self._coerce
        for index, item in enumerate(flat):
            if is_missing(item):
                raise self._element_error(item, index, step_, "null inside a list; only the "
                                                               "whole value can be missing")
            try:
                out.append(coerce(item))
            except FeatureValueError as err:
                if len(flat) == 1 and step_ is None:
                    raise
                raise self._element_error(item, index, step_, err.reason) from None
        return out

    def _element_error(self, item: Any, index: int, step: int | None,
                       reason: str) -> FeatureValueError:
        where = f"element {index} (row-major)" + (f" of step {step}" if step is not None else "")
        return FeatureValueError(self.spec.name, item, self.expected, f"{reason}; at {where}")

    def _coerce_array(self, array: np.ndarray) -> np.ndarray | None:
        """Vectorised coercion of a numeric array, or None to fall back to the element loop."""
        kind = array.dtype.kind
        dtype = self.spec.dtype
        if dtype == "int64":
            if self.spec.scale:  # numbers times 10**scale: one by one, exactly
                return None
            if kind == "i" or kind == "b":
                return array.astype(np.int64, copy=False)
            if kind == "u":
                bad = np.flatnonzero(array > INT64_MAX)
            elif kind == "f":
                with np.errstate(invalid="ignore"):
                    bad = np.flatnonzero(~np.isfinite(array) | (array != np.floor(array))
                                         | (array >= 2.0**63) | (array < -(2.0**63)))
            else:
                return None
            if bad.size:
                self._raise_at(array, int(bad[0]))
            return array.astype(np.int64)
        if dtype == "float":
            if kind not in "iuf":
                return None
            values = array.astype(np.float64, copy=False)
            with np.errstate(invalid="ignore"):
                bad = np.isfinite(values) & (np.abs(values) >= FLOAT32_OVERFLOW)
                if self.spec.nan == "error":
                    bad |= np.isnan(values)
            if bad.any():
                self._raise_at(array, int(np.flatnonzero(bad)[0]))
            return values.astype("<f4")
        return None

    def _raise_at(self, array: np.ndarray, index: int) -> None:
        """Raise the scalar policy's error for the element a vectorised check flagged."""
        item = array[index].item()
        try:
            self._coerce(item)
        except FeatureValueError as err:
            raise self._element_error(item, index, None, err.reason) from None
        raise AssertionError(f"element {index} ({item!r}) was flagged but passes the policy")


class ExampleEncoder:
    """Compiles feature specs once; :meth:`encode` turns a record into Example bytes.

    With any ``sequence`` feature the output is a SequenceExample: sequence features go to
    ``feature_lists``, the others to ``context``.

    Args:
        specs: the features, in the config's order.
    """

    def __init__(self, specs: Sequence[FeatureSpec]) -> None:
        self.specs = tuple(specs)
        self.sequence = any(spec.sequence for spec in self.specs)
        self._plans = [_FeaturePlan(spec) for spec in self.specs]
        # When every feature is one map entry (no sequences, no ragged row lengths), records
        # are assembled entry by entry in the map's sorted key order, fixed once here.
        keys = [plan.spec.values_key for plan in self._plans]
        self._sorted = (sorted(self._plans, key=lambda plan: plan.spec.values_key.encode())
                        if all(plan.single for plan in self._plans)
                        and len(set(keys)) == len(keys) else None)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Serialized Example (or SequenceExample) bytes; raises FeatureValueError.

        Args:
            record: field name to value (nested mappings for dotted paths).

        Returns:
            The serialized Example or SequenceExample.

        Raises:
            FeatureValueError: a value the coercion policy refuses.
        """
        return b"".join(self.encode_pieces(record)[0])

    def encode_pieces(self, record: Mapping[str, Any]) -> tuple[list[bytes], int]:
        """:meth:`encode` as pieces and their total size, unjoined: a caller gathering many
        records joins them all at once, so a large value (an image) is copied once.

        Args:
            record: field name to value.

        Returns:
            The pieces, and their total size in bytes.

        Raises:
            FeatureValueError: a value the coercion policy refuses.
        """
        if self._sorted is not None:
            pieces: list[bytes] = []
            size = 0
            try:
                for plan in self._sorted:
                    entry = plan.entry(record)
                    if entry is not None:
                        pieces += entry[0]
                        size += entry[1]
            except FeatureValueError:
                pass  # the path below names the first bad feature in the config's order
            else:
                head = wire.example_head(size)
                return [head, *pieces], len(head) + size
        context: dict[str, Any] = {}
        lists: dict[str, Any] = {}
        for plan in self._plans:
            target = lists if plan.spec.sequence else context
            for key, feature in plan.items(record):
                target[key] = feature
        if self.sequence:
            data = wire.encode_sequence_example(context, lists)
            return [data], len(data)
        return wire.example_pieces(context)


def _typed(spec: FeatureSpec, values: list) -> Any:
    if spec.dtype == "int64":
        return np.asarray(values, dtype=np.int64)
    if spec.dtype == "float":
        return np.asarray(values, dtype=np.float32)
    if spec.dtype == "string":
        values = [v.decode("utf-8") for v in values]
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class ExampleDecoder:
    """Serialized Examples back to values of the declared shapes.

    Scalars come back as Python values, fixed and variable shapes as numpy arrays (object
    arrays for bytes and strings), ragged shapes as nested lists, omitted features as None.

    Args:
        specs: the features, as the records were written with them.
    """

    def __init__(self, specs: Sequence[FeatureSpec]) -> None:
        self.specs = tuple(specs)
        self.sequence = any(spec.sequence for spec in self.specs)

    def decode(self, data: bytes) -> dict[str, Any]:
        """One serialized Example (or SequenceExample) as feature name to value.

        Args:
            data: the serialized record.

        Returns:
            Feature name to value, shaped as the class docstring says.

        Raises:
            ExampleDecodeError: the bytes are not a serialized Example.
        """
        if self.sequence:
            context, lists = wire.decode_sequence_example(data)
        else:
            context, lists = wire.decode_example(data), {}
        out: dict[str, Any] = {}
        for spec in self.specs:
            if spec.sequence:
                steps = lists.get(spec.name)
                out[spec.name] = None if steps is None else [
                    self._shape(spec, self._values(spec, spec.name, step), {}) for step in steps
                ]
                continue
            raw = context.get(spec.values_key)
            if raw is None:
                out[spec.name] = None
                continue
            lengths = {
                dim: self._values(spec, spec.row_lengths_key(dim),
                                  context.get(spec.row_lengths_key(dim), ("int64_list", [])),
                                  kind="int64_list")
                for dim in spec.ragged_dims
            }
            out[spec.name] = self._shape(spec, self._values(spec, spec.values_key, raw), lengths)
        return out

    @staticmethod
    def _values(spec: FeatureSpec, key: str, raw: tuple, kind: str | None = None) -> list:
        stored_kind, values = raw
        want = kind or spec.kind
        if stored_kind not in (want, None):
            raise ValueError(f"feature {key!r} is stored as {stored_kind}, the spec says {want}")
        return values

    @staticmethod
    def _shape(spec: FeatureSpec, values: list, lengths: dict[int, list]) -> Any:
        shape = spec.shape
        if not shape:
            if len(values) != 1:
                raise ValueError(f"feature {spec.name!r} holds {len(values)} values, "
                                 "the spec says a scalar")
            value = values[0]
            return value.decode("utf-8") if spec.dtype == "string" else value
        typed = _typed(spec, values)
        if not spec.is_ragged:
            return typed.reshape(shape if spec.is_fixed else (-1, *shape[1:]))
        return _unflatten(typed.tolist(), shape, lengths)


def _unflatten(flat: list, shape: tuple[int, ...], lengths: dict[int, list]) -> list:
    """Rebuild nested lists from flat values, uniform dims and stored row lengths."""
    nodes: list = flat
    for dim in range(len(shape) - 1, 0, -1):
        sizes = lengths[dim] if shape[dim] == -1 else [shape[dim]] * (len(nodes) // shape[dim])
        grouped, pos = [], 0
        for size in sizes:
            grouped.append(nodes[pos:pos + size])
            pos += size
        nodes = grouped
    return nodes
