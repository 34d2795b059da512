"""Source readers: files on any Beam filesystem -> chunks of typed records, plus rejects.

A reader emits :class:`RecordChunk` s (a few thousand records from one file, with the row
number of the first), never one element per record: Beam's per-element cost would otherwise
dominate. Records that cannot even be parsed (a malformed CSV line, a cell that is not a
number) leave through the ``rejected`` output as dead-letter rows naming the file, the row,
the feature and the reason; the ``read`` counter counts both kinds, so read = built + rejected.

CSV cells are typed by the feature specs: an int64 feature accepts integers and
``true``/``false``; a float feature decimals, exponents, ``nan`` and ``inf``; a list-shaped
feature a JSON array; null markers (``source.csv.null_values``) are missing values.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_tfrecords.sinks import storage
from beam_tfrecords.transforms.coercion import preview
from beam_tfrecords.transforms.feature_spec import FeatureSpec

__all__ = ["COUNTS", "REJECTED", "ReadCsv", "RecordChunk", "dead_letter", "parse_cell"]

REJECTED = "rejected"
# Tagged output of (counter name, n) pairs that the commit step adds up: unlike runner metrics
# they are part of the data, so every runner delivers them exactly once.
COUNTS = "counts"
CHUNK_ROWS = 4096
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|inf|infinity)$",
                    re.IGNORECASE)
_TRUE = {"true": 1, "false": 0}


@dataclasses.dataclass(frozen=True)
class RecordChunk:
    """Records of one source file with their 1-based data row numbers.

    The records travel either as Python mappings (``rows``) or, on the columnar fast path, as
    one ``pyarrow.RecordBatch`` (``batch``, with ``rows`` empty); consumers that need
    mappings call :meth:`records`. Record ``i`` is row ``row_numbers[i]``, or
    ``first_row + i`` when ``row_numbers`` is empty (no row of the run was rejected while
    parsing).
    """

    path: str
    first_row: int
    rows: list
    row_numbers: tuple = ()
    batch: Any = None  # pyarrow.RecordBatch holding the records column-wise, or None

    def __len__(self) -> int:
        return self.batch.num_rows if self.batch is not None else len(self.rows)

    def records(self) -> list:
        """The records as mappings (converted from ``batch`` when the chunk is columnar)."""
        return self.batch.to_pylist() if self.batch is not None else self.rows

    def row_number(self, index: int) -> int:
        return self.row_numbers[index] if self.row_numbers else self.first_row + index


def dead_letter(path: str, row: int, feature: str, reason: str, value: Any,
                record: Any) -> dict[str, Any]:
    """One dead-letter row: where the record came from, what was wrong, and previews."""
    return {
        "source": path,
        "row": row,
        "feature": feature,
        "reason": reason,
        "value": preview(value),
        "record": preview(record, 400),
    }


def _chunk(path: str, first: int, rows: list, numbers: list) -> RecordChunk:
    contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
    return RecordChunk(path, first, rows, () if contiguous else tuple(numbers))


class CellError(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_cell(spec: FeatureSpec, text: str) -> Any:
    """A CSV cell's text as the Python value the encoder expects for ``spec``."""
    if spec.shape or spec.sequence:
        try:
            return json.loads(text)
        except ValueError as err:
            raise CellError(
                f"a list-shaped feature needs a JSON array in the cell: {err}") from None
    cell = text.strip()
    if spec.dtype == "int64":
        lowered = cell.lower()
        if lowered in _TRUE:
            return _TRUE[lowered]
        if _INT.match(cell):
            return int(cell)
        raise CellError("not an integer or true/false")
    if spec.dtype == "float":
        if _FLOAT.match(cell):
            value = float(cell)
            if math.isinf(value) and "inf" not in cell.lower():
                raise CellError("outside the float64 range")
            return value
        raise CellError("not a number")
    return text  # bytes and string cells are kept exactly, spaces included


class _ReadCsvFile(beam.DoFn):
    """One CSV file -> RecordChunks of typed rows; unparseable rows -> rejected."""

    def __init__(self, options: Any, features: Sequence[FeatureSpec]) -> None:
        self._options = options
        self._features = tuple(features)
        self._read = Metrics.counter("sources", "records_read")
        self._rejected = Metrics.counter("sources", "records_rejected_at_parse")

    def process(self, path: str) -> Iterator[Any]:
        opts = self._options
        # A column feeds the features whose source path starts with it.
        by_column: dict[str, list[FeatureSpec]] = {}
        for spec in self._features:
            by_column.setdefault(spec.source[0], []).append(spec)
        nulls = set(opts.null_values)
        with storage.open_read(path) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
            reader = csv.reader(text, delimiter=opts.delimiter, quotechar=opts.quotechar,
                                strict=True)
            columns = list(opts.columns)
            row_number = 0
            rejected = 0
            chunk: list = []
            numbers: list = []
            first = 1
            try:
                if opts.header:
                    header = next(reader, None)
                    if header is None:
                        return
                    columns = header
                for cells in reader:
                    row_number += 1
                    self._read.inc()
                    record, error = self._record(columns, cells, by_column, nulls)
                    if error is not None:
                        self._rejected.inc()
                        rejected += 1
                        feature, reason, value = error
                        yield beam.pvalue.TaggedOutput(
                            REJECTED, dead_letter(path, row_number, feature, reason, value, cells)
                        )
                        continue
                    if not chunk:
                        first = row_number
                    chunk.append(record)
                    numbers.append(row_number)
                    if len(chunk) >= CHUNK_ROWS:
                        yield _chunk(path, first, chunk, numbers)
                        chunk, numbers = [], []
            except (csv.Error, UnicodeDecodeError) as err:
                # The rest of the file cannot be split into rows reliably: reject it as one.
                self._rejected.inc()
                rejected += 1
                row_number += 1
                yield beam.pvalue.TaggedOutput(
                    REJECTED, dead_letter(path, row_number, "", f"unreadable CSV from "
                                          f"here on: {err}", "", "")
                )
            if chunk:
                yield _chunk(path, first, chunk, numbers)
            yield beam.pvalue.TaggedOutput(COUNTS, ("read", row_number))
            yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_read", rejected))

    def _record(self, columns: list[str], cells: list[str], by_column: dict,
                nulls: set) -> tuple[dict | None, tuple | None]:
        if len(cells) != len(columns):
            return None, ("", f"malformed line: {len(cells)} cells, the header has "
                              f"{len(columns)}", cells)
        record: dict[str, Any] = {}
        for column, cell in zip(columns, cells):
            specs = by_column.get(column)
            if specs is None or cell in nulls:
                record[column] = None if cell in nulls else cell
                continue
            spec = specs[0]
            try:
                record[column] = parse_cell(spec, cell)
            except CellError as err:
                return None, (spec.name, f"column {column!r}: {err.reason}", cell)
        return record, None


class ReadCsv(beam.PTransform):
    """File paths -> RecordChunks (main output), dead-letter rows (``rejected``) and
    ``counts`` pairs (``read``, ``rejected_at_read``)."""

    def __init__(self, options: Any, features: Sequence[FeatureSpec]) -> None:
        super().__init__()
        self._options = options
        self._features = tuple(features)

    def expand(self, paths):
        return (
            paths
            | "SpreadFiles" >> beam.Reshuffle()
            | "ParseCsv" >> beam.ParDo(_ReadCsvFile(self._options, self._features))
            .with_outputs(REJECTED, COUNTS, main="records")
        )
