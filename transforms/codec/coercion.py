"""The coercion policy: which Python and numpy values may become which feature values.

TensorFlow users find type mistakes only when training breaks, and the protobuf backends
disagree on bad values (protobuf 7 rejects ``True`` in an Int64List, 6.x accepts it; a float64
of 1e40 silently becomes ``inf`` in a FloatList). So the policy lives here, in one flat ladder
per target type, and never depends on the installed protobuf:

* int64  <- int, bool, numpy integers and bools, uint64 up to 2**63-1, floats that are whole
  numbers (a fractional part is an error, never truncated), Decimal whole numbers, dates and
  datetimes (integers since 1970-01-01 UTC in the feature's unit; naive datetimes are UTC),
  times of day (integers since midnight in the unit), and text by the rules a CSV cell
  follows, whatever brought it (``text_values.int64_text``: ``"42"``, ``" 517.0 "``,
  ``"true"``; and, for features with a date ``format`` -- a config's ``unit:`` or
  ``format:`` -- date and datetime text). A feature's ``scale`` k stores numbers (ints,
  Decimals, and floats as the shortest decimal that reads back as them, ``repr``; not bools,
  dates or times) as their value times 10**k, which must be a whole number (never rounded):
  ``scale: 2`` makes the Decimal 12.34 and the float 12.34 the integer 1234.
* float  <- float, int, numpy floats and ints, Decimal, and number text by a CSV cell's rules
  (``text_values.float_text``: ``"2.5"``, ``"1e-3"``, ``"nan"``). A finite value outside the float32
  range is an error, not a silent inf; an explicit inf or NaN is a value (NaN policy aside).
  bool is refused: store flags as int64.
* bytes  <- bytes, bytearray, memoryview, str (UTF-8), numpy bytes and str.
  string <- the same, and the bytes must be valid UTF-8.
* None, an absent field, or NaT is *missing*; 0, 0.0, "", b"" and False are values.

Overflow and underflow follow one table for every format, :data:`RANGE_RULES`.

Every rejection is a :class:`FeatureValueError` that names the feature, the value, its type
and what was expected. Pure: no Beam, no I/O.
"""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from beam_tfrecords.errors import UserError
from beam_tfrecords.transforms.codec.text_values import (
    FLOAT32_RANGE,
    FRACTION,
    INT64_RANGE,
    NOT_FINITE,
    TextValueError,
    float_text,
    int64_text,
    whole_number,
)

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "FeatureValueError",
    "RANGE_RULES",
    "RangeRule",
    "element_coercer",
    "is_missing",
    "preview",
    "type_name",
]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# float64 values at or beyond this magnitude round to infinity as float32 (FLT_MAX is
# (2 - 2**-23) * 2**127; the halfway point to the next binade rounds up, to inf).
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
SCALE_FRACTION = "has more than {scale} decimal places (scale: {scale}); refusing to round"


class RangeRule(NamedTuple):
    """One row of :data:`RANGE_RULES`: numbers of a ``case`` into a feature of ``dtype`` (and
    ``scale``) are a dead letter with the reason ``refused``, or (``refused`` empty) a value,
    stored as ``stored`` says. ``examples`` are number text as a CSV cell or a JSON number
    writes it (``nan`` and ``inf`` are JSON's ``NaN`` and ``Infinity``)."""

    dtype: str
    scale: int
    case: str
    examples: tuple[str, ...]
    refused: str
    stored: str = ""


# Overflow and underflow, the same in every format: CSV cells, JSON numbers (json_number keeps
# what a double cannot hold as its exact Decimal), Parquet and Avro values, Python values given
# to the API. What is representable is a value; what overflows its feature type is a dead
# letter, never an inf and never a wrapped integer; a float too small for float32 rounds as
# IEEE 754 rounds (1e-50 is stored as 0.0 in every format). Text never reaches a decimal cast
# that cannot take it (text_values.decimal_text): 0e-999999999 is simply zero.
RANGE_RULES: tuple[RangeRule, ...] = (
    RangeRule("int64", 0, "zero, whatever its exponent or sign",
              ("0e-999999999", "-0e-99999", "0e999999999", "0.000", "0e-99999999999999999999"),
              "", "0"),
    RangeRule("int64", 0, "past [-2**63, 2**63-1]",
              ("9223372036854775808", "-9223372036854775809", "1e19", "1e999999999999",
               "1e99999999999999999999", "9" * 5000), INT64_RANGE),
    RangeRule("int64", 0, "a fractional part, however small",
              ("0.5", "1e-400", "1e-2147483647", "1e-99999999999999999999"), FRACTION),
    RangeRule("int64", 0, "not finite", ("nan", "inf", "-inf"), NOT_FINITE),
    RangeRule("int64", 2, "zero, whatever its exponent or sign",
              ("0e-999999999", "-0e-99999", "0e999999999"), "", "0"),
    RangeRule("int64", 2, "times 10**scale, past [-2**63, 2**63-1]",
              ("92233720368547758.08", "1e999999999999"), INT64_RANGE),
    RangeRule("int64", 2, "more decimal places than the scale",
              ("0.001", "1e-2147483647"), SCALE_FRACTION.format(scale=2)),
    RangeRule("float", 0, "zero, whatever its exponent",
              ("0e-999999999", "-0e-99999", "0e999999999"), "", "0.0 or -0.0 (its sign kept)"),
    RangeRule("float", 0, "finite, at or past 2**128 - 2**103 in magnitude (overflow)",
              ("3.5e38", "-1e39", "1e400", "1e999999999999", "1e99999999999999999999",
               "9" * 5000), FLOAT32_RANGE),
    RangeRule("float", 0, "not zero, but below float32's normal range (underflow)",
              ("1e-40", "1e-50", "-1e-400", "1e-2147483647", "1e-99999999999999999999"), "",
              "the nearest float32: a subnormal, or a zero of its sign"),
    RangeRule("float", 0, "inf, -inf or nan written as such", ("inf", "-inf", "nan"), "",
              "as written (nan: error refuses NaN)"),
)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_EPOCH_DATE = datetime.date(1970, 1, 1)
_MICROS_PER_UNIT = {"s": 10**6, "ms": 10**3, "us": 1, "days": 86_400 * 10**6}
_PREVIEW_CHARS = 80


class FeatureValueError(UserError, ValueError):
    """A value that the coercion policy refuses, with everything needed to fix it.

    Args:
        feature: the feature's name.
        value: the value refused; shown shortened in the message.
        expected: what the feature needs (``int64``, ``float of shape [3]``).
        reason: why the value is refused, when its type alone does not say.
    """

    def __init__(self, feature: str, value: Any, expected: str, reason: str = "") -> None:
        self.feature = feature
        self.value = value
        self.value_type = type_name(value)
        self.expected = expected
        self.reason = reason
        message = (
            f"feature {feature!r}: expected {expected}, got {self.value_type} {preview(value)}"
        )
        super().__init__(f"{message} ({reason})" if reason else message)


def type_name(value: Any) -> str:
    """A short type name for messages: ``int``, ``numpy.float64``, ``datetime.date``.

    Args:
        value: any value.

    Returns:
        The name of its type, with its top-level package unless a builtin.
    """
    cls = type(value)
    module = cls.__module__
    if module == "builtins":
        return cls.__qualname__
    return f"{module.split('.')[0]}.{cls.__qualname__}"


def preview(value: Any, limit: int = _PREVIEW_CHARS) -> str:
    """``repr`` cut to ``limit`` characters, so a huge field never floods a message.

    Args:
        value: any value; arrays are shown by shape and dtype.
        limit: the most characters returned.

    Returns:
        The shortened ``repr``.
    """
    if isinstance(value, np.ndarray):
        text = f"array(shape={list(value.shape)}, dtype={value.dtype})"
    else:
        try:
            text = repr(value)
        except Exception:  # a broken __repr__ must not hide the real error
            text = f"<{type_name(value)}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_missing(value: Any) -> bool:
    """None and NaT are missing. Zero, empty and False values are not.

    Args:
        value: a record's value.

    Returns:
        Whether it counts as absent.
    """
    if value is None:
        return True
    return isinstance(value, (np.datetime64, np.timedelta64)) and bool(np.isnat(value))


def _check_int64(feature: str, value: Any, number: int) -> int:
    if INT64_MIN <= number <= INT64_MAX:
        return number
    return _fail(feature, value, "int64", INT64_RANGE)


def _fail(feature: str, value: Any, expected: str, reason: str = "") -> Any:
    raise FeatureValueError(feature, value, expected, reason)


def _epoch_micros(value: datetime.date) -> int:
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds
    return (value - _EPOCH_DATE).days * 86_400 * 10**6


def _micros_to_unit(micros: int, unit: str) -> int:
    if unit == "ns":
        return micros * 1000
    return micros // _MICROS_PER_UNIT[unit]  # floor: 1969-12-31T23:59:59.5 is second -1


def _datetime64_to_unit(value: np.datetime64, unit: str) -> int:
    numpy_unit = "D" if unit == "days" else unit
    return int(value.astype(f"datetime64[{numpy_unit}]").astype(np.int64))


def _scaled(feature: str, value: Any, scale: int) -> int:
    """``value`` (an int, float or Decimal) times 10**scale, exactly, as an int64."""
    if isinstance(value, numbers.Integral):
        return _check_int64(feature, value, int(value) * 10**scale)
    # A float is the decimal it is written as (its shortest round-trip form, ``repr``): the
    # JSON number 12.34 is 1234 with scale 2, though the double is 12.339999999999999857...
    exact = value if isinstance(value, decimal.Decimal) else decimal.Decimal(repr(float(value)))
    if not exact.is_finite():
        return _fail(feature, value, "int64", NOT_FINITE)
    sign, digits, exponent = exact.as_tuple()
    try:  # exact (no context rounds a tuple), and never expanded: 1E+999999999 stays small
        scaled = decimal.Decimal((sign, digits, int(exponent) + scale))
        return whole_number(scaled)
    except TextValueError as err:
        reason = SCALE_FRACTION.format(scale=scale) if err.reason == FRACTION else err.reason
        return _fail(feature, value, "int64", reason)
    except (decimal.InvalidOperation, ValueError):  # an exponent at Decimal's very edge
        return _fail(feature, value, "int64", INT64_RANGE if int(exponent) > 0 else
                     SCALE_FRACTION.format(scale=scale))


def _time_of_day(feature: str, value: datetime.time, unit: str) -> int:
    if value.tzinfo is not None:
        return _fail(feature, value, "int64", "a time of day with a time zone; only naive "
                                              "times (since midnight) are stored")
    micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 10**6 + value.microsecond
    return micros * 1000 if unit == "ns" else micros // _MICROS_PER_UNIT[unit]


def to_int64(feature: str, value: Any, unit: str = "s", fmt: str | None = None,
             scale: int = 0) -> int:
    """One value as an int64, by the ladder in the module docstring; ``fmt`` (``iso8601`` or a
    strptime layout) lets text be a date or datetime; ``scale`` multiplies numbers by
    10**scale (exactly).

    Args:
        feature: the feature's name, for errors.
        value: any Python or numpy value; text is read by the CSV rules.
        unit: the unit of dates and times (``s``, ``ms``, ``us``, ``ns``, ``days``).
        fmt: how text dates are written; None: text must be a number.
        scale: decimal places kept by multiplying by 10**scale.

    Returns:
        The int64 value.

    Raises:
        FeatureValueError: the value is not an int64 by the policy.
    """
    cls = type(value)
    if scale and cls is not bool and not isinstance(value, np.bool_) and isinstance(
            value, (numbers.Integral, float, np.floating, decimal.Decimal)):
        return _scaled(feature, value, scale)
    if cls is int:
        return _check_int64(feature, value, value)
    if cls is bool or isinstance(value, np.bool_):
        return int(value)
    if isinstance(value, numbers.Integral):  # numpy ints, uint64, int subclasses
        return _check_int64(feature, value, int(value))
    if isinstance(value, decimal.Decimal):  # never expanded: 1E+999999999 is out of range
        try:
            return whole_number(value)
        except TextValueError as err:
            return _fail(feature, value, "int64", err.reason)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            return _fail(feature, value, "int64", NOT_FINITE)
        if value != int(value):
            return _fail(feature, value, "int64", FRACTION)
        return _check_int64(feature, value, int(value))
    if isinstance(value, datetime.date):
        micros = _epoch_micros(value)
        if unit == "ns":  # a pandas Timestamp (Arrow's nanosecond values) keeps its nanoseconds
            return _check_int64(feature, value, micros * 1000 + getattr(value, "nanosecond", 0))
        return _check_int64(feature, value, _micros_to_unit(micros, unit))
    if isinstance(value, np.datetime64):
        return _datetime64_to_unit(value, unit)
    if isinstance(value, datetime.time):
        return _time_of_day(feature, value, unit)
    if isinstance(value, str):  # text: the rules a CSV cell follows (text_values.int64_text)
        try:
            parsed = int64_text(value, unit, fmt, scale)
        except TextValueError as err:
            return _fail(feature, value, "int64", err.reason)
        return to_int64(feature, parsed, unit, None, scale) if scale else _check_int64(
            feature, value, parsed)
    return _fail(feature, value, "int64", "not an integer, bool, date or datetime")


def to_float(feature: str, value: Any, nan: str = "allow") -> float:
    """One value as a float (to be stored as float32).

    Args:
        feature: the feature's name, for errors.
        value: a number (Python, numpy or Decimal) or number text.
        nan: the feature's ``nan`` policy; ``error`` refuses NaN, any other returns it (a
            ``missing`` NaN is dropped before coercion).

    Returns:
        The value as a Python float.

    Raises:
        FeatureValueError: the value is not a float by the policy, or past float32's range.
    """
    cls = type(value)
    if cls is float or isinstance(value, np.floating):
        number = float(value)
    elif cls is bool or isinstance(value, np.bool_):
        return _fail(feature, value, "float", "a bool is not a float; store flags as int64")
    elif isinstance(value, (numbers.Integral, decimal.Decimal)):
        try:
            number = float(value)
        except OverflowError:
            number = math.inf if value > 0 else -math.inf
        # a finite Decimal or int past float64 (1E+400); Decimal('Infinity') is inf, a value
        if math.isinf(number) and (not isinstance(value, decimal.Decimal) or value.is_finite()):
            return _fail(feature, value, "float", FLOAT32_RANGE)
    elif isinstance(value, str):  # text: the rules a CSV cell follows (text_values.float_text)
        try:
            number = float_text(value)
        except TextValueError as err:
            return _fail(feature, value, "float", err.reason)
    else:
        return _fail(feature, value, "float", "not a number")
    if math.isnan(number):
        if nan == "error":
            return _fail(feature, value, "float", "NaN is not allowed (nan: error)")
        return number
    if math.isfinite(number) and abs(number) >= FLOAT32_OVERFLOW:
        return _fail(feature, value, "float", FLOAT32_RANGE)
    return number


def to_bytes(feature: str, value: Any) -> bytes:
    """One value as bytes; text is encoded as UTF-8, binary stays as it is, a UUID is its
    canonical text (``12345678-1234-...``: what Avro's ``uuid`` string holds).

    Args:
        feature: the feature's name, for errors.
        value: bytes, text or a UUID.

    Returns:
        The bytes.

    Raises:
        FeatureValueError: any other type, or text not encodable as UTF-8.
    """
    if isinstance(value, bytes):  # includes numpy.bytes_
        return bytes(value)
    if isinstance(value, str):  # includes numpy.str_
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as err:
            return _fail(feature, value, "bytes", f"not encodable as UTF-8: {err.reason}")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, uuid.UUID):  # Avro's and Parquet's uuid: its canonical text
        return str(value).encode("ascii")
    return _fail(feature, value, "bytes", "not bytes or str")


def to_utf8(feature: str, value: Any) -> bytes:
    """One value as UTF-8 text bytes; bytes input must already be valid UTF-8.

    Args:
        feature: the feature's name, for errors.
        value: text or bytes.

    Returns:
        The UTF-8 bytes.

    Raises:
        FeatureValueError: bytes that are not valid UTF-8.
    """
    data = to_bytes(feature, value)
    if not isinstance(value, str):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            return _fail(
                feature, value, "string (UTF-8 text)",
                f"invalid UTF-8 at byte {err.start}: {err.reason}",
            )
    return data


def element_coercer(dtype: str, feature: str, unit: str = "s", nan: str = "allow",
                    fmt: str | None = None, scale: int = 0) -> Callable[[Any], Any]:
    """A one-argument function coercing one scalar element for a feature of ``dtype``.

    Args:
        dtype: the feature's type: ``int64``, ``float``, ``bytes`` or ``string``.
        feature: the feature's name, for errors.
        unit: the unit of dates and times (``int64``).
        nan: ``allow``, ``error`` or ``missing`` for NaN (``float``).
        fmt: how text dates are written (``int64``).
        scale: decimal places kept (``int64``).

    Returns:
        The function.

    Raises:
        ValueError: an unknown ``dtype``.
    """
    if dtype == "int64":
        return lambda value: to_int64(feature, value, unit, fmt, scale)
    if dtype == "float":
        return lambda value: to_float(feature, value, nan)
    if dtype == "bytes":
        return lambda value: to_bytes(feature, value)
    if dtype == "string":
        return lambda value: to_utf8(feature, value)
    raise ValueError(f"feature {feature!r}: unknown type {dtype!r}")
