"""What each output feature is: its type, shape, source field and missing-value policy.

A :class:`FeatureSpec` is the single description of a feature that every part of the project
shares: the config loader builds it from YAML, the encoders compile it, the decoder reshapes by
it, and :func:`tf_parse_spec` exports it as the ``feature_spec.json`` that maps 1:1 onto
``tf.io.FixedLenFeature`` / ``VarLenFeature`` / ``RaggedFeature`` (and, for sequence features,
``FixedLenSequenceFeature``).

How a shape is stored (the layout TensorFlow's parsers expect):

* ``[]`` -- a scalar: one value.
* ``[d0, d1, ...]`` all fixed -- ``d0*d1*...`` values, row-major.
* ``[-1]`` or ``[-1, d1, ...]`` -- a variable number of rows of fixed size, stored flat.
* any ``-1`` after the first dimension -- ragged: the flat values under
  ``<name>/flat_values`` and, for every ragged inner dimension ``k``, the row lengths under
  ``<name>/row_lengths_<k>``.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.transforms.codec.text_values import check_format

__all__ = [
    "DTYPES",
    "MAX_SCALE",
    "MISSING_POLICIES",
    "NAN_POLICIES",
    "TIME_UNITS",
    "FeatureSpec",
    "FeatureSpecError",
    "stored_keys",
    "tf_parse_spec",
    "tf_parse_spec_python",
]

# Our type names -> (the tf.train list kind they are stored in, the tf.io dtype name).
DTYPES: dict[str, tuple[str, str]] = {
    "int64": ("int64_list", "int64"),
    "float": ("float_list", "float32"),
    "bytes": ("bytes_list", "string"),
    "string": ("bytes_list", "string"),  # text, stored as UTF-8 bytes; validated as UTF-8
}
MISSING_POLICIES = ("error", "omit", "default", "empty")
NAN_POLICIES = ("allow", "error", "missing")
# Units for dates, datetimes and timestamps stored as int64 (integers since 1970-01-01 UTC).
TIME_UNITS = ("s", "ms", "us", "ns", "days")
# The largest ``scale`` (10**18 < 2**63: a scale past it leaves only 0 in the int64 range).
MAX_SCALE = 18


class FeatureSpecError(UserError, ValueError):
    """An invalid :class:`FeatureSpec`; ``field`` names the attribute at fault (``shape``).

    Args:
        field: the spec's attribute at fault (``dtype``, ``shape``...).
        message: one line saying what is wrong.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One output feature.

    Attributes:
      name: the feature key in the Example (``/`` allowed, e.g. ``metadata/height``).
      dtype: ``int64``, ``float``, ``bytes`` or ``string``.
      shape: ``()`` for a scalar; fixed sizes and ``-1`` for variable dimensions.
      source: path into the source record; each element is one level of nesting.
      missing: what a missing (None / absent) value means: ``error`` rejects the record,
        ``omit`` leaves the feature out of that Example, ``default`` stores ``default``,
        ``empty`` stores an empty list (the key present, no values: what readers that need
        every record to carry every feature -- DALI, the PyTorch ``tfrecord`` loader -- want).
      default: the value stored when ``missing == "default"``.
      nan: for floats: ``allow`` stores NaN, ``error`` rejects it, ``missing`` treats it as a
        missing value (then ``missing`` decides).
      unit: how dates and datetimes become int64.
      sequence: a per-step feature list of a SequenceExample; the value is a list of steps,
        each of ``shape``.
      format: for int64 features, how text becomes a date or datetime (in ``unit``):
        ``iso8601`` or a ``strptime`` layout (``%d/%m/%Y %H:%M``); None: text is never a date.
        A config's ``unit:`` alone means ``iso8601`` (:mod:`text_values`).
      scale: for int64 features, numbers (ints, floats, decimals) are stored as their exact
        value times ``10**scale`` (0 to 18), refused when that is not a whole number: a
        ``decimal(12, 2)`` price with ``scale: 2`` is stored as its unscaled integer (cents).
    """

    name: str
    dtype: str
    shape: tuple[int, ...] = ()
    source: tuple[str, ...] = ()
    missing: str = "error"
    default: Any = None
    nan: str = "allow"
    unit: str = "s"
    sequence: bool = False
    format: str | None = None
    scale: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise FeatureSpecError("name", f"a feature needs a non-empty name, got {self.name!r}")
        if not isinstance(self.dtype, str) or self.dtype not in DTYPES:
            raise FeatureSpecError(
                "dtype",
                f"feature {self.name!r}: type {self.dtype!r} is not one of {sorted(DTYPES)}",
            )
        shape = tuple(self.shape)
        for dim in shape:
            if not isinstance(dim, int) or isinstance(dim, bool) or (dim < 0 and dim != -1):
                raise FeatureSpecError(
                    "shape",
                    f"feature {self.name!r}: shape {list(shape)!r} may hold only positive "
                    "sizes and -1 (variable)",
                )
        if 0 in shape:
            raise FeatureSpecError(
                "shape", f"feature {self.name!r}: shape {list(shape)!r} has a zero size"
            )
        object.__setattr__(self, "shape", shape)
        if not self.source:
            object.__setattr__(self, "source", tuple(self.name.split("/")))
        else:
            object.__setattr__(self, "source", tuple(self.source))
        if self.missing not in MISSING_POLICIES:
            raise FeatureSpecError(
                "missing",
                f"feature {self.name!r}: missing {self.missing!r} is not one of "
                f"{list(MISSING_POLICIES)}",
            )
        if self.missing == "default" and self.default is None:
            raise FeatureSpecError(
                "default", f"feature {self.name!r}: missing: default needs a default value"
            )
        if self.nan not in NAN_POLICIES:
            raise FeatureSpecError(
                "nan",
                f"feature {self.name!r}: nan {self.nan!r} is not one of {list(NAN_POLICIES)}",
            )
        if self.nan != "allow" and self.dtype != "float":
            raise FeatureSpecError(
                "nan",
                f"feature {self.name!r}: nan: {self.nan} applies to float features only "
                f"(type is {self.dtype})",
            )
        if self.nan == "missing" and shape:
            raise FeatureSpecError(
                "nan",
                f"feature {self.name!r}: nan: missing applies to scalar floats only; a NaN "
                "inside a list cannot make the whole value missing",
            )
        if self.unit not in TIME_UNITS:
            raise FeatureSpecError(
                "unit",
                f"feature {self.name!r}: unit {self.unit!r} is not one of {list(TIME_UNITS)}",
            )
        if self.format is not None:
            if self.dtype != "int64":
                raise FeatureSpecError(
                    "format",
                    f"feature {self.name!r}: format applies to int64 features only (dates "
                    f"and datetimes as integers; type is {self.dtype})",
                )
            try:
                check_format(self.format)
            except ValueError as err:
                raise FeatureSpecError("format", f"feature {self.name!r}: {err}") from None
        if (not isinstance(self.scale, int) or isinstance(self.scale, bool)
                or not 0 <= self.scale <= MAX_SCALE):
            raise FeatureSpecError(
                "scale",
                f"feature {self.name!r}: scale {self.scale!r} must be a whole number from 0 "
                f"to {MAX_SCALE} (numbers are stored times 10**scale)",
            )
        if self.scale:
            if self.dtype != "int64":
                raise FeatureSpecError(
                    "scale",
                    f"feature {self.name!r}: scale applies to int64 features only (numbers "
                    f"stored as integers times 10**scale; type is {self.dtype})",
                )
            if self.format is not None:
                raise FeatureSpecError(
                    "scale",
                    f"feature {self.name!r}: scale is for numbers, and this feature reads text "
                    f"as dates (format {self.format!r}, or unit:); choose one",
                )
        if self.sequence and self.is_ragged:
            raise FeatureSpecError(
                "shape",
                f"feature {self.name!r}: a sequence feature's per-step shape "
                f"{list(shape)!r} may be variable only in its first dimension",
            )

    @property
    def kind(self) -> str:
        """The tf.train list kind: ``int64_list``, ``float_list`` or ``bytes_list``."""
        return DTYPES[self.dtype][0]

    @property
    def tf_dtype(self) -> str:
        return DTYPES[self.dtype][1]

    @property
    def is_ragged(self) -> bool:
        """True when an inner dimension varies, so row lengths must be stored."""
        return -1 in self.shape[1:]

    @property
    def is_fixed(self) -> bool:
        return -1 not in self.shape

    @property
    def fixed_size(self) -> int:
        """The number of values of a fixed shape (1 for a scalar)."""
        return math.prod(self.shape)

    @property
    def ragged_dims(self) -> tuple[int, ...]:
        """Indices (>= 1) of the inner dimensions whose row lengths are stored."""
        return tuple(k for k, dim in enumerate(self.shape) if k >= 1 and dim == -1)

    @property
    def values_key(self) -> str:
        """The stored feature that holds the (flat) values."""
        return f"{self.name}/flat_values" if self.is_ragged else self.name

    def row_lengths_key(self, dim: int) -> str:
        """The Example key of a ragged dimension's row lengths.

        Args:
            dim: the dimension's index in the shape.

        Returns:
            ``<name>/row_lengths_<dim>``.
        """
        return f"{self.name}/row_lengths_{dim}"


def stored_keys(spec: FeatureSpec) -> tuple[str, ...]:
    """Every feature key this spec writes into an Example.

    Args:
        spec: the feature (its name, shape and ragged dimensions).

    Returns:
        Its values key, then one row-lengths key per ragged dimension.
    """
    return (spec.values_key,) + tuple(spec.row_lengths_key(k) for k in spec.ragged_dims)


def _partitions(spec: FeatureSpec) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for k, dim in enumerate(spec.shape[1:], start=1):
        if dim == -1:
            parts.append({"type": "RowLengths", "key": spec.row_lengths_key(k)})
        else:
            parts.append({"type": "UniformRowLength", "length": dim})
    return parts


def _context_parse_spec(spec: FeatureSpec) -> dict[str, Any]:
    """The tf.io parse spec of one (non-sequence) feature.

    A fixed shape parses as FixedLenFeature unless records may omit it or store it empty
    (``missing: omit | empty``); then its first dimension is effectively "0 or d0" and it
    parses like a variable one (an empty list parses as an empty VarLen value).
    """
    dtype = spec.tf_dtype
    if spec.is_fixed and spec.missing not in ("omit", "empty"):
        return {"type": "FixedLenFeature", "shape": list(spec.shape), "dtype": dtype}
    if len(spec.shape) <= 1:
        return {"type": "VarLenFeature", "dtype": dtype}
    return {
        "type": "RaggedFeature",
        "dtype": dtype,
        "value_key": spec.values_key,
        "partitions": _partitions(spec),
        "row_splits_dtype": "int64",
    }


def _sequence_parse_spec(spec: FeatureSpec) -> dict[str, Any]:
    dtype = spec.tf_dtype
    if spec.is_fixed:
        return {
            "type": "FixedLenSequenceFeature",
            "shape": list(spec.shape),
            "dtype": dtype,
            "allow_missing": spec.missing == "omit",
        }
    return {"type": "VarLenFeature", "dtype": dtype}


def tf_parse_spec(specs: tuple[FeatureSpec, ...] | list[FeatureSpec]) -> dict[str, Any]:
    """The ``feature_spec.json`` document: a JSON form of the ``tf.io`` parse spec.

    Each entry maps 1:1 onto a ``tf.io`` class (``type``) and its arguments, so a reader needs
    no knowledge of this package to build ``tf.io.parse_example``'s ``features`` argument.

    Args:
        specs: the features; any with ``sequence`` make it a SequenceExample spec.

    Returns:
        The JSON-ready document.
    """
    sequence = any(s.sequence for s in specs)
    doc: dict[str, Any] = {
        "example_type": "SequenceExample" if sequence else "Example",
        "features": {s.name: _context_parse_spec(s) for s in specs if not s.sequence},
    }
    if sequence:
        doc["sequence_features"] = {s.name: _sequence_parse_spec(s) for s in specs if s.sequence}
    return doc


def _py_dtype(name: str) -> str:
    return f"tf.{name}"


def _py_feature(spec: dict[str, Any]) -> str:
    kind, dtype = spec["type"], _py_dtype(spec["dtype"])
    if kind == "FixedLenFeature":
        return f"tf.io.FixedLenFeature({spec['shape']}, {dtype})"
    if kind == "FixedLenSequenceFeature":
        return (f"tf.io.FixedLenSequenceFeature({spec['shape']}, {dtype}, "
                f"allow_missing={spec.get('allow_missing', False)})")
    if kind == "VarLenFeature":
        return f"tf.io.VarLenFeature({dtype})"
    parts = []
    for part in spec["partitions"]:
        if part["type"] == "RowLengths":
            parts.append(f"tf.io.RaggedFeature.RowLengths({part['key']!r})")
        else:
            parts.append(f"tf.io.RaggedFeature.UniformRowLength({part['length']})")
    return (f"tf.io.RaggedFeature({dtype}, value_key={spec['value_key']!r}, "
            f"partitions=[{', '.join(parts)}], row_splits_dtype=tf.int64)")


def tf_parse_spec_python(doc: dict[str, Any]) -> str:
    """``feature_spec.json`` as ready-to-paste Python that builds the ``tf.io`` objects.

    Args:
        doc: a ``feature_spec.json`` document (:func:`tf_parse_spec`).

    Returns:
        Python source text.
    """
    lines = ["import tensorflow as tf", ""]
    groups = [("features", doc["features"])]
    if doc.get("example_type") == "SequenceExample":
        groups = [("context_features", doc["features"]),
                  ("sequence_features", doc.get("sequence_features", {}))]
    for variable, entries in groups:
        lines.append(f"{variable} = {{")
        lines.extend(f"    {name!r}: {_py_feature(spec)}," for name, spec in entries.items())
        lines.append("}")
    if doc.get("example_type") == "SequenceExample":
        lines.append("# tf.io.parse_sequence_example(serialized, context_features, "
                     "sequence_features)")
    else:
        lines.append("# tf.io.parse_example(serialized, features)")
    return "\n".join(lines) + "\n"
