"""CSV string cells -> typed Arrow columns, exactly as the per-row reader types each cell.

:func:`type_batch` accepts a value from Arrow's casts only where Arrow's grammar is a subset
of :func:`read_csv.parse_cell`'s and the values agree (decimal integers without ``+``; floats
Arrow parses to a finite value; exact ``true``/``false``; whole numbers and dates as
:mod:`text_values` decides them; for a feature with ``scale``, plain decimals of one number
of places, as a decimal128 equal to each cell's ``Decimal``); every other cell goes through
:func:`read_csv.parse_cell` itself, one by one. A value Arrow cannot hold as the per-row
reader would raises :class:`csv_columnar.NeedsRows`: the per-row reader reads that block.

The cells come from ``csv_columnar.py`` (bytes -> blocks of rows of string cells).
Pure: no Beam, no file systems.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_tfrecords.transforms.codec.text_values import (
    ISO8601,
    decimal_text,
    time_values,
    whole_values,
)
from beam_tfrecords.transforms.readers.csv_columnar import NeedsRows

__all__ = ["CellParser", "decimal_cells", "type_batch"]

_INT64 = (-(2**63), 2**63 - 1)
_INT_RE = r"^-?[0-9]{1,18}$"  # always within int64; Arrow and int() agree on these
_FLOAT_RE = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"
# ASCII classes, not (?i): RE2 folds the long s (U+017F) onto "s"; str.lower() does not.
_BOOL_RE = r"^(?:[tT][rR][uU][eE]|[fF][aA][lL][sS][eE])$"
# Decimal text whose Decimal(cell) and Arrow's decimal128 agree digit for digit, repr
# included: an optional sign, digits, optionally a point and more digits.
_PLAIN_DECIMAL_RE = r"^[+-]?[0-9]+(?:\.[0-9]+)?$"
_NEGATIVE_ZERO_RE = r"^-[0.]*$"  # Decimal keeps the sign of -0.00; a decimal128 cannot
_DECIMAL_DIGITS = 38  # decimal128's precision

CellParser = Callable[[Any, str], Any]  # read_csv.parse_cell: (spec, text) -> value


def type_batch(batch: pa.RecordBatch, columns: Sequence[str], specs: Mapping[str, Any],
               nulls: Sequence[str], parse_cell: CellParser, cell_error: type[Exception],
               ) -> tuple[pa.RecordBatch, dict[int, tuple[str, str, str]]]:
    """A batch of string cells -> (typed batch named ``columns``, rejected rows).

    ``specs`` maps a column to the feature spec that types it (int64 / float / bytes /
    string; list-shaped features are the per-row reader's); other columns stay strings. A
    cell spelled like one of ``nulls`` is null. Rejected rows map a row index to
    ``(feature, reason, cell)`` for the first failing column, as the per-row reader reports;
    the caller drops them from the batch. Raises :class:`NeedsRows` for a value an int64
    column cannot hold (the per-row reader keeps it; the encoder rejects it later), and for
    a feature with ``scale`` whose cells :func:`decimal_cells` cannot type exactly.

    Args:
        batch: the block's string cells.
        columns: the names of the batch's columns, in order.
        specs: column name to the feature spec that types it.
        nulls: cell spellings read as null.
        parse_cell: the per-row reader's cell parser, for the error of a rejected cell.
        cell_error: the exception ``parse_cell`` raises.

    Returns:
        The typed batch, and row index to ``(feature, reason, cell)``.

    Raises:
        NeedsRows: the block must be read row by row.
    """
    null_set = pa.array(list(nulls), pa.string()) if nulls else None
    arrays = []
    errors: dict[int, tuple[int, str, str]] = {}
    for index, column in enumerate(columns):
        cells = batch.column(index)
        isnull = None
        if null_set is not None:
            mask = pc.is_in(cells, value_set=null_set)
            if pc.any(mask).as_py():
                isnull = mask
        spec = specs.get(column)
        if spec is not None and getattr(spec, "scale", 0):
            arrays.append(decimal_cells(cells, isnull, column))
            continue
        if spec is None or spec.dtype not in ("int64", "float"):
            arrays.append(cells if isnull is None else
                          pc.if_else(isnull, pa.scalar(None, pa.string()), cells))
            continue
        keep = None
        if isnull is not None:
            keep = np.flatnonzero(~isnull.to_numpy(zero_copy_only=False))
            cells = cells.take(pa.array(keep))
        typed, bad = _type_cells(cells, spec, parse_cell, cell_error)
        if keep is not None:
            full = np.zeros(len(isnull), np.int64 if spec.dtype == "int64" else np.float64)
            full[keep] = typed.to_numpy()
            typed = pa.array(full, mask=isnull.to_numpy(zero_copy_only=False))
            bad = {int(keep[i]): reason for i, reason in bad.items()}
        arrays.append(typed)
        for row, reason in bad.items():
            if row not in errors:  # the first failing column, as the per-row reader reports
                errors[row] = (index, spec.name, f"column {column!r}: {reason}")
    rejected = {row: (name, reason, batch.column(index)[row].as_py())
                for row, (index, name, reason) in errors.items()}
    return pa.RecordBatch.from_arrays(arrays, names=list(columns)), rejected


def decimal_cells(cells: pa.Array, isnull: pa.Array | None, column: str) -> pa.Array:
    """The cells of a feature with ``scale`` as one decimal128 column whose values are what
    parse_cell gives each cell -- its exact ``Decimal``, digit for digit, so that a value's
    repr in a dead letter is the same on either path (``12.30`` stays ``Decimal('12.30')``)
    -- and which the encoder scales column-wise. That holds when every present cell is plain
    decimal text (sign, digits, point, digits) with the same number of decimal places and
    none is a negative zero; any other block raises :class:`NeedsRows` and the per-row
    reader reads it (true/false, exponents, spaces, mixed places).

    Args:
        cells: the column's string cells.
        isnull: which cells are null; None for none.
        column: the column's name, for the reason.

    Returns:
        A decimal128 array.

    Raises:
        NeedsRows: the cells are not plain decimals of one scale.
    """
    present = cells if isnull is None else pc.if_else(isnull, pa.scalar(None, pa.string()),
                                                      cells)
    why = f"column {column!r}: decimal text for scale:"
    if present.null_count == len(present):
        return pa.nulls(len(present), pa.decimal128(1, 0))
    plain = pc.match_substring_regex(present, _PLAIN_DECIMAL_RE)
    if not pc.all(plain, skip_nulls=True, min_count=0).as_py():
        raise NeedsRows(f"{why} not all plain decimal text")
    point = pc.find_substring(present, ".")
    places = pc.if_else(pc.equal(point, -1), 0,
                        pc.subtract(pc.subtract(pc.utf8_length(present), point), 1))
    bounds = pc.min_max(places)
    fewest, most = bounds["min"].as_py(), bounds["max"].as_py()
    if fewest != most or most > _DECIMAL_DIGITS:
        raise NeedsRows(f"{why} decimal places differ ({fewest} to {most})")
    if pc.any(pc.match_substring_regex(present, _NEGATIVE_ZERO_RE)).as_py():
        raise NeedsRows(f"{why} a negative zero")
    if not (decimal_text(present) | ~present.is_valid().to_numpy(zero_copy_only=False)).all():
        # Arrow's cast would wrap a 39-digit value around without a word
        raise NeedsRows(f"{why} more digits than a decimal128 holds")
    try:
        return pc.cast(present, pa.decimal128(_DECIMAL_DIGITS, most))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # more than 38 digits
        raise NeedsRows(f"{why} more digits than a decimal128 holds") from None


def _type_cells(cells: pa.Array, spec: Any, parse_cell: CellParser,
                cell_error: type[Exception]) -> tuple[pa.Array, dict[int, str]]:
    """Non-null string cells -> (int64/float64 values, {index: reason}) for ``spec``."""
    if spec.dtype == "int64":
        out, slow = _int64_cells(cells, spec)
        if not len(slow):
            return pa.array(out), {}
    else:
        values, slow = _float_cells(cells)
        if not len(slow):
            return values, {}
        out = values.to_numpy().copy()  # no nulls here: zero-copy view, then a writable copy
    bad: dict[int, str] = {}
    for i in slow.tolist():
        text = cells[i].as_py()
        try:
            value = parse_cell(spec, text)
        except cell_error as err:
            bad[i] = getattr(err, "reason", str(err))
            continue
        if spec.dtype == "int64" and not _INT64[0] <= value <= _INT64[1]:
            raise NeedsRows(f"{text!r} does not fit an int64 column")
        out[i] = value
    return pa.array(out), bad


_NONE = np.empty(0, np.int64)


def _int_cells(cells: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """int64 values where Arrow provably agrees with parse_cell, and the other indices (their
    values are placeholders)."""
    is_true = pc.equal(cells, "true")
    if pc.all(pc.or_(is_true, pc.equal(cells, "false"))).as_py():
        return pc.cast(is_true, pa.int64()), _NONE
    try:
        values = pc.cast(cells, pa.int64())
    except pa.ArrowInvalid:
        values = None
    # Arrow also reads hex (0x1f); parse_cell does not. Digits with one optional minus only.
    if values is not None and pc.all(pc.ascii_is_decimal(pc.utf8_ltrim(cells, "-"))).as_py():
        return values, _NONE
    digits = pc.match_substring_regex(cells, _INT_RE)
    words = pc.match_substring_regex(cells, _BOOL_RE)
    numbers = pc.cast(pc.if_else(digits, cells, "0"), pa.int64())
    values = pc.if_else(words, pc.cast(pc.match_substring_regex(cells, "^[tT]"), pa.int64()),
                        numbers)
    slow = np.flatnonzero(~pc.or_(digits, words).to_numpy(zero_copy_only=False))
    return values, slow


def _int64_cells(cells: pa.Array, spec: Any) -> tuple[np.ndarray, np.ndarray]:
    """int64 values where pyarrow.compute provably agrees with parse_cell, and the other
    indices: integers and true/false, whole numbers in decimal text (``517.0``, ``1e3``) and
    -- for a feature with a date format -- dates and datetimes, each decided over the cells
    the steps before left (:mod:`text_values`). The first cell chooses which step goes first,
    as an Arrow cast costs about a microsecond per value it refuses. A ``strptime`` layout is
    tried first, as parse_cell does (``%Y%m%d`` reads ``20240301`` as a date), and what it
    leaves is parse_cell's; ISO-8601 text and numbers never look alike."""
    fmt = spec.format
    if fmt is not None and fmt != ISO8601:
        values, decided = time_values(cells, spec.unit, fmt)
        return values, np.flatnonzero(~decided)
    n = len(cells)
    steps: list[Callable[[pa.Array], tuple[np.ndarray, np.ndarray]]] = [_ints, whole_values]
    first = cells[0].as_py() if n else ""
    if fmt is not None:
        dates = functools.partial(time_values, unit=spec.unit)
        steps.insert(0 if first[4:5] == "-" else 2, dates)
    elif "." in first or "e" in first.lower():  # 517.0: the integer cast would refuse each
        steps.reverse()
    values = np.zeros(n, np.int64)
    slow = np.arange(n)
    for step in steps:
        if not slow.size:
            break
        got, decided = step(cells if slow.size == n else cells.take(pa.array(slow)))
        values[slow[decided]] = got[decided]
        slow = slow[~decided]
    return values, slow


def _ints(cells: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_int_cells` as (values, decided)."""
    values, slow = _int_cells(cells)
    decided = np.ones(len(cells), bool)
    decided[slow] = False
    return values.to_numpy(zero_copy_only=False), decided


def _float_cells(cells: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """float64 values where Arrow provably agrees with parse_cell, and the other indices.

    Arrow's number grammar is parse_cell's without Unicode digits or surrounding spaces, and
    both round correctly; NaN, infinities and overflow (sign bits, ``outside the float64
    range``) are left to parse_cell."""
    try:
        values = pc.cast(cells, pa.float64())
        fast = None
    except pa.ArrowInvalid:
        fast = pc.match_substring_regex(cells, _FLOAT_RE)
        values = pc.cast(pc.if_else(fast, cells, "0"), pa.float64())
    ok = pc.is_finite(values)
    if fast is not None:
        ok = pc.and_(ok, fast)
    if pc.all(ok).as_py():
        return values, _NONE
    return values, np.flatnonzero(~ok.to_numpy(zero_copy_only=False))
