"""Text -> int64, the same way in every format: whole numbers, dates and datetimes.

A Parquet double ``517.0`` declared int64 is stored as 517 and a timestamp as an epoch integer
in the feature's ``unit:``; the same values written as text (CSV cells, JSON strings) are read
here so that they give the same integers:

* **Whole numbers** (CSV cells of int64 features): decimal text with a fraction or an exponent
  (``517.0``, ``1e3``, ``-2.0E+2``) is its *exact* decimal value when that is a whole number in
  the int64 range -- a fractional part is refused, never truncated, and so is a value that only
  rounds to a whole double (``1.0000000000000000001``, ``1e-400``).
* **Dates and datetimes** (features whose config names ``unit:`` or ``format:``): ISO-8601
  text -- ``YYYY-MM-DD``, optionally ``T`` or a space and ``hh``, ``hh:mm``, ``hh:mm:ss`` or
  ``hh:mm:ss.f`` (1 to 9 digits), optionally ``Z`` or an offset ``±hh``, ``±hhmm``,
  ``±hh:mm`` -- the grammar of Arrow's own ISO-8601 parser; or, with ``format:``, any layout
  ``datetime.strptime`` reads. Text without an offset is UTC. The instant becomes an integer
  in the unit exactly as a Parquet timestamp of that instant does
  (:func:`arrow_columns.temporal_values`): a finer part the unit cannot hold is floored
  (``1969-12-31T23:59:59.5`` is second -1); nanoseconds are kept for ``unit: ns``.

Arrow's decimal cast reads text exactly only within bounds (:func:`decimal_text`): past 38
digits or a scale of 38 it wraps around without a word (``1.`` and 39 zeros is read as 0, and
so is ``1e-39``), and an exponent or a fraction of millions of digits overflows the stack
(pyarrow 25 segfaults on ``0e-999999999`` and ``1e-2147483647``). Text outside them never
reaches that cast: :func:`decimal_of` reads it, exactly, one value at a time -- any number of
digits, and an exponent past Decimal's own range too. A JSON number a double cannot hold
(``1e400``, ``1e-400``) or an integer past ``int()``'s 4300 digits is read as its exact
``Decimal`` (:func:`json_number`, :func:`json_integer`), so that it meets the same range rules
as the same text in a CSV cell (:data:`coercion.RANGE_RULES`).

Surrounding whitespace is ignored. Per value: :func:`parse_whole`, :func:`parse_time` (the
reference). Over Arrow string columns: :func:`whole_values` and :func:`time_values` decide what
can be proved equal to the reference -- an exact decimal cast, Arrow's ISO-8601 cast (the same
grammar), a ``strptime`` layout of zero-padded numbers read at its fixed places with numpy --
and leave the rest to the caller; :func:`text_times` finishes those one by one.

Pure: pyarrow and numpy, no Beam, no I/O.
"""

from __future__ import annotations

import datetime
import decimal
import math
import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "ISO8601",
    "TextValueError",
    "check_format",
    "decimal_of",
    "decimal_text",
    "float_text",
    "int64_text",
    "json_integer",
    "json_number",
    "parse_time",
    "parse_whole",
    "text_times",
    "time_values",
    "whole_number",
    "whole_values",
]

ISO8601 = "iso8601"  # the format name of ISO-8601 text
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# The reasons of the range rules (coercion.RANGE_RULES): the same words in every format.
INT64_RANGE = "outside the int64 range [-2**63, 2**63-1]"
FRACTION = "has a fractional part; refusing to truncate"
NOT_FINITE = "not a finite number"
FLOAT32_RANGE = "outside the float32 range; it would become inf"
_NS_PER = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "days": 86_400 * 10**9}
_MICROS_PER = {"s": 10**6, "ms": 10**3, "us": 1, "days": 86_400 * 10**6}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
# Python's datetime range (years 1 to 9999), in microseconds from the epoch.
_MIN_MICROS = -62_135_596_800 * 10**6
_MAX_MICROS = 253_402_300_799 * 10**6 + 999_999
_ISO = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[T ]([0-9]{2})(?::([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?)?"
    r"(Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?")
# The grammar of _ISO with its ranges, for RE2 (pyarrow.compute): naive and with an offset.
_DATE_RE = r"[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_TIME_RE = r"(?:[01][0-9]|2[0-3])(?::[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,9})?)?)?"
_NAIVE_RE = f"^{_DATE_RE}(?:[T ]{_TIME_RE})?$"
_ZONED_RE = f"^{_DATE_RE}[T ]{_TIME_RE}(?:Z|[+-](?:[01][0-9]|2[0-3])(?::?[0-5][0-9])?)$"
_NOT_ISO = ("not an ISO-8601 date or datetime (YYYY-MM-DD, optionally with [T ]hh[:mm[:ss[.f]]] "
            "and Z or ±hh[:mm])")
# ASCII decimal text, in parts. Arrow's decimal cast reads it exactly as Decimal() does (or
# refuses it) only within bounds (decimal_text): at most DECIMAL_DIGITS digits before the
# exponent, an exponent of at most DECIMAL_EXPONENT_DIGITS digits, at most DECIMAL_DIGITS
# fraction digits once the exponent is applied, and under 10**DECIMAL_DIGITS. Past them it
# wraps around without a word (1. and 39 zeros is 0, 1e-39 is 0), and millions of exponent or
# fraction digits overflow its stack (0e-999999999 is a segfault).
DECIMAL_DIGITS = 38
DECIMAL_EXPONENT_DIGITS = 4
_NUMBER_PARTS_RE = (r"^[+-]?(?P<whole>[0-9]*)\.?(?P<fraction>[0-9]*)"
                    rf"(?:[eE]\+?(?P<exponent>-?[0-9]{{1,{DECIMAL_EXPONENT_DIGITS}}}))?$")
_NUMBER_RE = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
_PLAIN_RE = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$"  # no exponent
# Number text with an exponent, in parts, for decimal_of (digits as Decimal reads them).
_SCIENTIFIC = re.compile(r"([+-]?)(\d*\.?\d*)[eE]([+-]?)(\d+)")
_EXPONENT_LIMIT = 10**15  # decimal_of's clamp: far past every type, inside Decimal's range
# Python's strptime directives (3.10+); layouts of the zero-padded numbers among them are
# decided over whole columns.
_DIRECTIVES = set("aAbBcdfHIjmMpSUwWxXyYzZGuV%")
_COLUMN_DIRECTIVES = set("YmdHMS%")
_LEAF = 4  # a failing cast of at most this many values leaves them to the caller


class TextValueError(ValueError):
    """Text that is not the value its feature needs; ``reason`` says why.

    Args:
        reason: why, as a phrase (``not a number``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def check_format(fmt: str) -> str:
    """``fmt`` if it is ``iso8601`` or a ``strptime`` layout; else a ValueError naming the
    directive at fault.

    Args:
        fmt: ``iso8601`` or a ``strptime`` layout.

    Returns:
        ``fmt`` unchanged.

    Raises:
        ValueError: neither.
    """
    if not isinstance(fmt, str) or not fmt:
        raise ValueError(f"format must be {ISO8601!r} or a strptime layout such as "
                         f"'%d/%m/%Y %H:%M', got {fmt!r}")
    if fmt == ISO8601:
        return fmt
    directives = re.findall(r"%(.?)", fmt)
    if not directives:
        raise ValueError(f"format {fmt!r} holds no strptime directive (%Y, %m, %d, ...)")
    for directive in directives:
        if directive not in _DIRECTIVES:
            raise ValueError(f"format {fmt!r}: %{directive} is not a strptime directive")
    try:
        datetime.datetime.strptime("", fmt)
    except re.error as err:  # a directive given twice
        raise ValueError(f"format {fmt!r}: {err.msg}") from None
    except ValueError:  # '' matches no layout with a directive: the layout itself is fine
        pass
    return fmt


# -- one value ----------------------------------------------------------------------------------

def decimal_of(text: str) -> decimal.Decimal:
    """Number text as its exact Decimal, of any length -- also where its exponent is past the
    range Decimal holds (about ±10**18): such an exponent is clamped to ±10**15, which no range
    rule tells apart from it (the number is zero, or overflows or underflows every feature
    type). Other text raises TextValueError.

    Args:
        text: number text.

    Returns:
        The exact Decimal.

    Raises:
        TextValueError: not a number.
    """
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        pass
    match = _SCIENTIFIC.fullmatch(text.strip())
    if match is None or not any(c.isdigit() for c in match[2]):
        raise TextValueError("not a number")
    sign, mantissa, exponent_sign, exponent = match.groups()
    if len(exponent.lstrip("0")) > len(str(_EXPONENT_LIMIT)) - 1:
        exponent = str(_EXPONENT_LIMIT)
    try:
        return decimal.Decimal(f"{sign}{mantissa}E{exponent_sign}{exponent}")
    except decimal.InvalidOperation:
        raise TextValueError("not a number") from None


def parse_whole(text: str) -> int:
    """Decimal number text (a fraction or an exponent allowed) as its exact whole value.

    Args:
        text: number text (spaces around it ignored).

    Returns:
        The value.

    Raises:
        TextValueError: not a number, not whole, or past int64.
    """
    return whole_number(decimal_of(text.strip()))


def whole_number(number: decimal.Decimal) -> int:
    """A Decimal's exact whole value in the int64 range, by the range rules: zero whatever its
    exponent (``0e-999999999``, ``-0E+99999``), a fractional part however small refused, a
    magnitude past int64 refused without computing it (``1e999999999999`` is never expanded).

    Args:
        number: the exact value of number text (:func:`decimal_of`).

    Returns:
        The value.

    Raises:
        TextValueError: not finite, not whole, or past int64.
    """
    if not number.is_finite():
        raise TextValueError(NOT_FINITE)
    if number.is_zero():
        return 0
    if number.adjusted() > 18:  # at least 10**19
        raise TextValueError(INT64_RANGE)
    if number.adjusted() < 0:  # 0 < |number| < 1, however many digits or small an exponent
        raise TextValueError(FRACTION)
    if number != number.to_integral_value():
        raise TextValueError(FRACTION)
    value = int(number)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TextValueError(INT64_RANGE)
    return value


# The scalar text of a number feature, wherever it comes from (a CSV cell, a BigQuery STRING
# column, Beam YAML's text fields, a dict a user built): one grammar and one set of reasons.
_INT_TEXT = re.compile(r"^[+-]?\d+$")
_FLOAT_TEXT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|inf|infinity)$",
                        re.IGNORECASE)
_BOOL_TEXT = {"true": 1, "false": 0}


def int64_text(text: str, unit: str = "s", fmt: str | None = None,
               scale: int = 0) -> int | decimal.Decimal:
    """The text of an int64 value (surrounding spaces ignored): an integer, ``true``/``false``,
    a whole number in decimal text (``517.0``, ``1e3``: as a Parquet double of that value is
    stored) or -- with a date ``fmt`` -- a date or datetime in ``unit``. With a ``strptime``
    layout the date is tried first (``%Y%m%d`` reads ``20240301`` as a date); ISO-8601 text and
    numbers never look alike. With ``scale`` a number is returned as its exact Decimal, which
    the encoder multiplies or refuses (12.34 with scale 2 is 1234; 1.005 is refused, never
    rounded). Other text raises TextValueError with the reason.

    Args:
        text: a cell's text.
        unit: the unit of dates (``s``, ``ms``, ``us``, ``ns``, ``days``).
        fmt: ``iso8601``, a ``strptime`` layout, or None for numbers only.
        scale: the feature's decimal scale.

    Returns:
        The value (a Decimal with ``scale``).

    Raises:
        TextValueError: the text is not such a value.
    """
    cell = text.strip()
    why = ""
    if fmt is not None and fmt != ISO8601:
        try:
            return parse_time(cell, unit, fmt)
        except TextValueError as err:
            why = err.reason
    lowered = cell.lower()
    if lowered in _BOOL_TEXT:
        return _BOOL_TEXT[lowered]
    if scale and (_INT_TEXT.match(cell) or _FLOAT_TEXT.match(cell)):
        return decimal_of(cell)
    if _INT_TEXT.match(cell):
        try:
            return int(cell)
        except ValueError:  # past int()'s 4300 digits: Decimal reads it, the rules judge it
            return parse_whole(cell)
    if _FLOAT_TEXT.match(cell):
        return parse_whole(cell)
    if fmt is None:
        raise TextValueError("not an integer or true/false")
    if fmt == ISO8601:
        try:
            return parse_time(cell, unit, fmt)
        except TextValueError as err:
            why = err.reason
    raise TextValueError(f"not an integer or true/false, and {why}")


def float_text(text: str) -> float:
    """The text of a float value (surrounding spaces ignored): decimal or scientific notation,
    ``nan``, ``inf``. A finite number past float64 (``1e400``) is refused as past float32,
    never read as ``inf``. Other text raises TextValueError.

    Args:
        text: a cell's text.

    Returns:
        The value.

    Raises:
        TextValueError: not a number, or past float32.
    """
    cell = text.strip()
    if _FLOAT_TEXT.match(cell):
        value = float(cell)
        if math.isinf(value) and "inf" not in cell.lower():  # 1e400: past float32 too
            raise TextValueError(FLOAT32_RANGE)
        return value
    raise TextValueError("not a number")


def json_number(text: str) -> float | decimal.Decimal:
    """A JSON number with a fraction or an exponent (``json.loads``'s ``parse_float``): the
    double it rounds to -- or, where no double holds it (``1e400`` is past float64, ``1e-400``
    is not zero but rounds to it), its exact Decimal, so that the range rules refuse or round
    it as they do the same text in a CSV cell, and it is never stored as ``inf``.

    Args:
        text: the number's JSON text.

    Returns:
        A float, or the exact Decimal.
    """
    value = float(text)
    if math.isinf(value) or (value == 0.0 and not decimal_of(text).is_zero()):
        return decimal_of(text)
    return value


def json_integer(text: str) -> int | decimal.Decimal:
    """A JSON integer (``json.loads``'s ``parse_int``): an int -- or, past Python's limit on
    digits for ``int()`` (4300), its exact Decimal, which the range rules refuse as they
    refuse any integer past int64 or float32, instead of failing the whole line.

    Args:
        text: the integer's JSON text.

    Returns:
        An int, or the exact Decimal.
    """
    try:
        return int(text)
    except ValueError:
        return decimal_of(text)


def _in_unit(ns: int, unit: str) -> int:
    value = ns // _NS_PER[unit]  # floor: 1969-12-31T23:59:59.5 is second -1
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise TextValueError(INT64_RANGE)
    return value


def _iso_ns(text: str) -> int:
    match = _ISO.fullmatch(text)
    if match is None:
        raise TextValueError(_NOT_ISO)
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        days = datetime.date(int(year), int(month), int(day)).toordinal() - _EPOCH_DAY
    except ValueError as err:
        raise TextValueError(f"not a valid date: {err}") from None
    hours, minutes, seconds = int(hour or 0), int(minute or 0), int(second or 0)
    if hours > 23 or minutes > 59 or seconds > 59:
        raise TextValueError("not a valid time of day (hours 00-23, minutes and seconds 00-59)")
    offset = 0
    if zone and zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0
        if zone_hours > 23 or zone_minutes > 59:
            raise TextValueError("not a valid UTC offset (hours 00-23, minutes 00-59)")
        offset = (zone_hours * 3600 + zone_minutes * 60) * (-1 if zone[0] == "-" else 1)
    total = days * 86_400 + hours * 3600 + minutes * 60 + seconds - offset
    return total * 10**9 + int((fraction or "").ljust(9, "0"))


def _strptime_ns(text: str, fmt: str) -> int:
    try:
        stamp = datetime.datetime.strptime(text, fmt)
    except (ValueError, OverflowError) as err:  # never an escaped error per value
        why = str(err)
        if len(why) > 100 or text in why:  # "time data '...' does not match format '...'"
            why = "does not match it"
        raise TextValueError(f"not a date or datetime in format {fmt!r}: {why}") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    delta = stamp - _EPOCH
    return ((delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds) * 1000


def parse_time(text: str, unit: str, fmt: str = ISO8601) -> int:
    """Date or datetime text as an integer since 1970-01-01 UTC in ``unit``.

    Args:
        text: a date or datetime.
        unit: the result's unit (``s``, ``ms``, ``us``, ``ns``, ``days``).
        fmt: ``iso8601`` or a ``strptime`` layout.

    Returns:
        The instant in ``unit``.

    Raises:
        TextValueError: the text is not a date in that format, or out of range.
    """
    text = text.strip()
    ns = _iso_ns(text) if fmt == ISO8601 else _strptime_ns(text, fmt)
    return _in_unit(ns, unit)


# -- whole columns ------------------------------------------------------------------------------

def _parts(arr: pa.Array, convert: Callable[[pa.Array], tuple[np.ndarray, ...] | None],
           width: int) -> tuple[list[np.ndarray], np.ndarray]:
    """``convert`` over ``arr``, or where it fails (an Arrow cast fails whole) over halves,
    down to :data:`_LEAF` values: (``width`` int64 outputs, where they hold)."""
    n = len(arr)
    outs = [np.zeros(n, np.int64) for _ in range(width)]
    ok = np.zeros(n, bool)
    pending = [(0, n)]
    while pending:
        start, stop = pending.pop()
        got = convert(arr.slice(start, stop - start))
        if got is not None:
            for out, part in zip(outs, got[:-1]):
                out[start:stop] = part
            ok[start:stop] = got[-1]
        elif stop - start > _LEAF:
            middle = (start + stop) // 2
            pending += [(middle, stop), (start, middle)]
    return outs, ok


def _int64s(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of an integer-like Arrow array, nulls as zeros."""
    valid = ~arr.is_null().to_numpy(zero_copy_only=False)
    if arr.null_count:
        arr = arr.fill_null(0)
    return arr.cast(pa.int64()).to_numpy(zero_copy_only=False), valid


def decimal_text(cells: pa.Array) -> np.ndarray:
    """Where string ``cells`` may be handed to Arrow's decimal cast (``decimal128(38, s)``):
    ASCII decimal text within the bounds above, which that cast reads exactly as ``Decimal()``
    does, or refuses. Anything else (``0e-999999999``, ``1e-39``, ``1.`` and 39 zeros) is for
    ``Decimal`` alone, which reads every length exactly. Text without an exponent is judged
    by its length (one pass); only the rest is taken apart.

    Args:
        cells: a string array.

    Returns:
        A bool per cell.
    """
    if not len(cells):
        return np.zeros(0, bool)
    plain = pc.match_substring_regex(cells, _PLAIN_RE).fill_null(False)
    short = pc.less_equal(pc.binary_length(cells), DECIMAL_DIGITS).fill_null(False)
    ok = pc.and_(plain, short).to_numpy(zero_copy_only=False)
    rest = np.flatnonzero(~plain.to_numpy(zero_copy_only=False))
    if rest.size:
        ok[rest] = _bounded_exponents(cells.take(pa.array(rest)))
    return ok


def _bounded_exponents(cells: pa.Array) -> np.ndarray:
    """:func:`decimal_text` of cells that are not plain decimals (an exponent, or not a
    number at all)."""
    shaped = pc.and_(pc.match_substring_regex(cells, _NUMBER_RE),
                     pc.match_substring_regex(cells, _NUMBER_PARTS_RE)).fill_null(False)
    parts = pc.extract_regex(pc.if_else(shaped, cells, "0"), _NUMBER_PARTS_RE)
    whole = pc.utf8_length(parts.field("whole"))
    fraction = pc.utf8_length(parts.field("fraction"))
    exponent = pc.cast(pc.if_else(pc.equal(parts.field("exponent"), ""), "0",
                                  parts.field("exponent")), pa.int64())
    ok = [pc.less_equal(pc.add(whole, fraction), DECIMAL_DIGITS),
          pc.less_equal(pc.abs(pc.subtract(fraction, exponent)), DECIMAL_DIGITS),
          pc.less_equal(pc.add(whole, exponent), DECIMAL_DIGITS)]
    bounded = pc.and_(pc.and_(ok[0], ok[1]), ok[2]).fill_null(False)
    return pc.and_(shaped, bounded).to_numpy(zero_copy_only=False)


def whole_values(cells: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values, decided) of string ``cells``: decided where the cell is ASCII decimal text
    whose exact value is a whole number in the int64 range, as :func:`parse_whole` gives it.

    Only :func:`decimal_text` is looked at. A double that is not whole (or not finite) means
    the text is not; one that is whole is only a hint, so the candidates are cast to
    ``decimal128(38, 0)``, which (within those bounds) fails rather than drop a digit.

    Args:
        cells: a string array.

    Returns:
        int64 values and a bool per cell.
    """
    n = len(cells)
    values, decided = np.zeros(n, np.int64), np.zeros(n, bool)
    if not n:
        return values, decided
    index = np.flatnonzero(decimal_text(cells))
    if not index.size:
        return values, decided
    doubles = pc.cast(cells.take(pa.array(index)), pa.float64()).to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        # |double| < 2**63 keeps the exact value inside int64 (2**63-1 itself rounds to 2**63
        # and is left to parse_whole).
        hint = np.isfinite(doubles) & (doubles == np.floor(doubles)) & (np.abs(doubles) < 2.0**63)
    index = index[hint]

    def exact(part: pa.Array) -> tuple[np.ndarray, np.ndarray] | None:
        try:
            return _int64s(pc.cast(pc.cast(part, pa.decimal128(38, 0)), pa.int64()))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None

    (got,), ok = _parts(cells.take(pa.array(index)), exact, 1)
    values[index] = got
    decided[index] = ok
    return values, decided


def _from_timestamps(stamps: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(microseconds, the nanoseconds below them, valid) of a timestamp array."""
    raw, valid = _int64s(stamps)
    if stamps.type.unit == "ns":
        micros, rest = np.divmod(raw, 1000)
    else:
        micros, rest = raw, np.zeros(raw.size, np.int64)
    return micros, rest, valid


def _first_text(cells: pa.Array) -> str:
    """The first non-null cell among the first few ('' if none): what the column looks like."""
    for i in range(min(len(cells), 64)):
        if cells[i].is_valid:
            return cells[i].as_py()
    return ""


def _looks_zoned(text: str) -> bool:
    return text.endswith("Z") or "+" in text[10:] or "-" in text[10:]


def _iso_parts(cells: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(micros, rest, decided) of ISO-8601 cells by Arrow's own parser (the grammar of
    :func:`parse_time`): microsecond timestamps hold every year, nanosecond ones 7 to 9
    fraction digits; text with and without an offset needs a type with and without a zone.

    A column alike throughout is one cast, of the kind its first value shows. Else (a failing
    cast costs about a microsecond per value it refuses) regular expressions of the grammar
    sort the cells into naive and zoned, each cast on its own -- those Arrow still refuses (a
    day the month lacks) by halves -- and leave the rest undecided."""

    def cast(to: list[pa.DataType]) -> Callable[[pa.Array], tuple | None]:
        def attempt(part: pa.Array) -> tuple | None:
            for target in to:
                try:
                    return _from_timestamps(pc.cast(part, target))
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    continue
            return None
        return attempt

    naive = [pa.timestamp("us"), pa.timestamp("ns")]
    zoned = [pa.timestamp("us", "UTC"), pa.timestamp("ns", "UTC")]
    first = _first_text(cells)
    if len(first) >= 10 and first[4:5] == "-":  # an ordinary column: all alike
        got = cast((zoned if _looks_zoned(first) else naive)[:1])(cells)
        if got is not None:
            return got
    n = len(cells)
    micros, rest, decided = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool))
    for pattern, types in ((_NAIVE_RE, naive), (_ZONED_RE, zoned)):
        match = pc.match_substring_regex(cells, pattern).fill_null(False)
        index = np.flatnonzero(match.to_numpy(zero_copy_only=False))
        if index.size:
            (m, r), ok = _parts(cells.take(pa.array(index)), cast(types), 2)
            micros[index], rest[index], decided[index] = m, r, ok
    return micros, rest, decided


def _layout(fmt: str) -> list[tuple[str, int]] | None:
    """A strptime format of zero-padded numbers and ASCII text as (directive or literal
    character, width) pieces; None when it holds anything else."""
    pieces: list[tuple[str, int]] = []
    for directive, literal in re.findall(r"%(.)|([^%])", fmt):
        if directive:
            if directive not in _COLUMN_DIRECTIVES:
                return None
            pieces.append(("lit%", 1) if directive == "%" else
                          (directive, 4 if directive == "Y" else 2))
        elif literal.isascii():
            pieces.append(("lit" + literal, 1))
        else:
            return None
    return pieces


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    year = year - (month <= 2)
    era = np.floor_divide(year, 400)
    yoe = year - era * 400
    doy = (153 * (month + np.where(month > 2, -3, 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


_MONTH_DAYS = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)


def _strptime_parts(cells: pa.Array, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(micros, rest, decided) of cells in a ``strptime`` layout of zero-padded numbers
    (%Y %m %d %H %M %S) and ASCII text, read at their fixed places with numpy: a cell counts
    when every digit is a digit, every other character the layout's and every field in
    range -- then Python's strptime, whose patterns try the two-digit forms first, reads the
    same fields. Unpadded fields, other directives, another case: left undecided."""
    n = len(cells)
    micros, rest, decided = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool)
    pieces = _layout(fmt)
    if pieces is None or not n:
        return micros, rest, decided
    width = sum(size for _, size in pieces)
    if pa.types.is_large_string(cells.type):
        offsets = np.frombuffer(cells.buffers()[1], np.int64)
    else:
        offsets = np.frombuffer(cells.buffers()[1], np.int32)
    offsets = offsets[cells.offset:cells.offset + n + 1].astype(np.int64)
    data = cells.buffers()[2]
    data = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    valid = ~cells.is_null().to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(valid & (np.diff(offsets) == width))
    if not rows.size:
        return micros, rest, decided
    if rows.size == n and offsets[n] - offsets[0] == n * width:  # no gather needed
        text = data[offsets[0]:offsets[n]].reshape(n, width)
    else:
        text = data[offsets[rows][:, None] + np.arange(width)]  # (rows, width) bytes
    columns = [name for name, size in pieces for _ in range(size)]  # one per character
    literal = [at for at, name in enumerate(columns) if name.startswith("lit")]
    number = [at for at in range(width) if at not in literal]
    expected = np.array([ord(columns[at][3]) for at in literal], np.uint8)
    good = np.all(text[:, literal] == expected, axis=1) if literal else np.ones(rows.size, bool)
    good &= np.all(text[:, number] - np.uint8(48) <= 9, axis=1)  # digits (uint8 wraps)
    fields = {"Y": 1900, "m": 1, "d": 1, "H": 0, "M": 0, "S": 0}  # Python's defaults
    at = 0
    for name, size in pieces:
        if not name.startswith("lit"):
            part = text[:, at:at + size].astype(np.int64) - 48
            fields[name] = part @ (10 ** np.arange(size - 1, -1, -1))
        at += size
    year, month, day = (np.asarray(fields[k]) + np.zeros(rows.size, np.int64) for k in "Ymd")
    hour, minute, second = (np.asarray(fields[k]) for k in "HMS")
    month_ok = (month >= 1) & (month <= 12)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    longest = _MONTH_DAYS[np.where(month_ok, month, 0)] + (leap & (month == 2))
    good &= (year >= 1) & month_ok & (day >= 1) & (day <= longest)
    good &= (hour <= 23) & (minute <= 59) & (second <= 59)
    days = _days_from_civil(year, np.where(month_ok, month, 1), day)
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second
    micros[rows] = np.where(good, seconds, 0) * 10**6
    decided[rows] = good
    return micros, rest, decided


def time_values(cells: pa.Array, unit: str, fmt: str = ISO8601
                ) -> tuple[np.ndarray, np.ndarray]:
    """(values in ``unit``, decided) of string ``cells``: decided where ``pyarrow.compute``
    gives the value :func:`parse_time` gives; nulls and the rest are left undecided.

    Args:
        cells: a string array.
        unit: the result's unit.
        fmt: ``iso8601`` or a ``strptime`` layout.

    Returns:
        int64 values and a bool per cell.
    """
    n = len(cells)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    if fmt == ISO8601:
        micros, rest, decided = _iso_parts(cells)
        early = decided & (micros < _MIN_MICROS + 2 * 86_400 * 10**6)
        if early.any():  # Arrow reads the year 0000; Python's dates start at 0001
            zero = pc.starts_with(cells, "0000").fill_null(False)
            decided &= ~(early & zero.to_numpy(zero_copy_only=False))
    else:  # no offsets (%z is Python's): the instant is the text's date, of years 1 to 9999
        micros, rest, decided = _strptime_parts(cells, fmt)
        decided &= (micros >= _MIN_MICROS) & (micros <= _MAX_MICROS)
    if unit == "ns":
        limit = (_INT64_MAX - 999) // 1000
        decided &= np.abs(micros) <= limit  # near the int64 ends: parse_time says
        values = np.where(decided, micros, 0) * 1000 + rest
    else:
        values = np.floor_divide(micros, _MICROS_PER[unit])
    return np.where(decided, values, 0), decided


def text_times(arr: pa.Array, unit: str, fmt: str = ISO8601
               ) -> tuple[np.ndarray, np.ndarray]:
    """(values in ``unit``, refused) of every string in ``arr``: :func:`time_values`, then
    :func:`parse_time` for what it left; nulls are zeros and not refused.

    Args:
        arr: a string array.
        unit: the result's unit.
        fmt: ``iso8601`` or a ``strptime`` layout.

    Returns:
        int64 values and a bool per cell.
    """
    values, decided = time_values(arr, unit, fmt)
    refused = np.zeros(len(arr), bool)
    if arr.null_count:
        decided |= arr.is_null().to_numpy(zero_copy_only=False)
    for index in np.flatnonzero(~decided).tolist():
        try:
            values[index] = parse_time(arr[index].as_py(), unit, fmt)
        except TextValueError:
            refused[index] = True
    return values, refused
