"""A CSV cell's text as the value the encoder expects: the text rules the per-row CSV reader
(:mod:`read_csv`) and ``init``'s sampling share. Kept apart from the reader, which brings Beam,
so that ``init`` types a sample without importing it."""

from __future__ import annotations

import json
from typing import Any

from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.text_values import (
    TextValueError,
    float_text,
    int64_text,
    json_integer,
    json_number,
)

__all__ = ["CellError", "parse_cell"]


class CellError(ValueError):
    """A CSV cell that its feature cannot take; ``reason`` says why.

    Args:
        reason: why, as a phrase.
    """
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_cell(spec: FeatureSpec, text: str) -> Any:
    """A CSV cell's text as the Python value the encoder expects for ``spec``: a JSON array
    for a list-shaped feature; for a number feature, the text rules every entry point shares
    (``text_values.int64_text`` / ``float_text``); bytes and string cells exactly as they are,
    spaces included.

    Args:
        spec: the cell's feature.
        text: the cell's text.

    Returns:
        The value.

    Raises:
        CellError: the text is not such a value.
    """
    if spec.shape or spec.sequence:
        try:
            return json.loads(text, parse_float=json_number, parse_int=json_integer)
        except ValueError as err:
            raise CellError(
                f"a list-shaped feature needs a JSON array in the cell: {err}") from None
    try:
        if spec.dtype == "int64":
            return int64_text(text, spec.unit, spec.format, spec.scale)
        if spec.dtype == "float":
            return float_text(text)
    except TextValueError as err:
        raise CellError(err.reason) from None
    return text
