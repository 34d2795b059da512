"""Source readers: files on any Beam filesystem -> chunks of typed records, plus rejects.

A reader emits :class:`RecordChunk` s (a few thousand records from one file, with the row
number of the first), never one element per record: Beam's per-element cost would otherwise
dominate. On the columnar path (the default) a chunk holds a ``pyarrow.RecordBatch``; CSV
blocks are split by ``pyarrow.csv`` and typed by ``pyarrow.compute`` (:mod:`csv_columnar`),
and any block where that could differ from the per-row reader (Python's ``csv`` module and
:func:`parse_cell`) is read by the per-row reader instead, so both give the same records, row
numbers and dead letters.

Records that cannot even be parsed (a malformed CSV row, a cell that is not a number, a row
longer than ``source.max_record_bytes``) leave through the ``rejected`` output as dead-letter
rows naming the file, the row, the feature and the reason; the ``read`` counter counts both
kinds, so read = built + rejected. Input that yields no record at all -- the rest of a file
after an unterminated quote, a file whose header cannot be read -- is *unread*: one
dead-letter row of kind ``unread`` per region (byte offset and size) and the ``unread_*``
counts (:func:`read_outputs`), so no input byte goes unaccounted for.

CSV cells are typed by the feature specs: an int64 feature accepts integers and
``true``/``false``; a float feature decimals, exponents, ``nan`` and ``inf``; a list-shaped
feature a JSON array; null markers (``source.csv.null_values``) are missing values. A row
with invalid UTF-8 is a dead letter naming its column; the rest of the file is still read.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.spread import Spread
from beam_tfrecords.transforms.batch_coders import SizedPickleCoder, rows_nbytes
from beam_tfrecords.transforms.codec.coercion import preview
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers import csv_columnar as cc
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES, Reject, Unread

__all__ = ["COUNTS", "REJECTED", "UNREAD_COUNTS", "ReadCsv", "RecordChunk", "Reject", "Unread",
           "dead_letter", "read_csv_header", "parse_cell", "unread_letter"]

REJECTED = "rejected"
# Tagged output of (counter name, n) pairs that the commit step adds up: unlike runner metrics
# they are part of the data, so every runner delivers them exactly once.
COUNTS = "counts"
# Besides "read" and "rejected_at_read", every reader emits these for every file (zeros too):
# files with any unread part, unread bytes, records known lost (Avro block and Parquet row
# group counts), and unread regions (one dead-letter row of kind "unread" each).
UNREAD_COUNTS = ("unread_files", "unread_bytes", "unread_rows", "unread_regions")
CHUNK_ROWS = 4096  # records per chunk on the per-row path
# On the columnar path: rows per RecordBatch chunk, unless its buffers reach BATCH_BYTES.
# Wide rows make smaller chunks: past a few MB a chunk's buffers (Arrow columns, the
# assembled Examples, the batch) stop being reused from chunk to chunk and are faulted in
# fresh each time (200k rows x 30 columns: 2.17-2.20 s with chunks up to 64 MB, 1.98-2.18 s
# up to 8 or 16 MB, 1.78-2.0 s up to 4 MB; the tutorial's 65,536 rows are 2 MB).
BATCH_ROWS = 65536
BATCH_BYTES = 4 << 20
_INT = re.compile(r"^[+-]?\d+$")
_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$|^[+-]?(nan|inf|infinity)$",
                    re.IGNORECASE)
_TRUE = {"true": 1, "false": 0}
_SURROGATE = re.compile("[\udc80-\udcff]")  # invalid UTF-8 bytes, as surrogateescape decodes them


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


class RecordChunkCoder(SizedPickleCoder):
    """RecordChunks' coder (transforms/batch_coders.py): sized by their buffers, not pickled."""

    value_type = RecordChunk

    def nbytes(self, value: RecordChunk) -> int:
        return value.batch.nbytes if value.batch is not None else rows_nbytes(value.rows)


beam.coders.registry.register_coder(RecordChunk, RecordChunkCoder)


def dead_letter(path: str, row: int | None, feature: str, reason: str, value: Any,
                record: Any) -> dict[str, Any]:
    """One dead-letter row for a rejected record: where it came from, what was wrong, and
    previews."""
    return {
        "source": path,
        "row": row,
        "feature": feature,
        "reason": reason,
        "value": preview(value),
        "record": preview(record, 400),
        "kind": "rejected",
    }


def unread_letter(path: str, unread: Unread) -> dict[str, Any]:
    """One dead-letter row for a region of input no record came from: where it starts (byte
    ``offset``, first ``row`` lost or None), its ``bytes``, the ``rows`` it held (None:
    unknown) and why."""
    return {
        "source": path,
        "row": unread.row,
        "feature": "",
        "reason": unread.reason,
        "value": "",
        "record": "",
        "kind": "unread",
        "offset": unread.offset,
        "bytes": unread.bytes,
        "rows": unread.rows,
    }


def _chunk(path: str, first: int, rows: list, numbers: list) -> RecordChunk:
    contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
    return RecordChunk(path, first, rows, () if contiguous else tuple(numbers))


def read_outputs(path: str, events: Iterable[Any], read_counter: Any,
                 rejected_counter: Any) -> Iterator[Any]:
    """A reader's outputs for one file, from its events (:mod:`read_events`): ``(row,
    record)`` for a good record, a :class:`RecordChunk` (a block read column-wise, passed
    on), a :class:`Reject` or an :class:`Unread`. Records are gathered into chunks of
    ``CHUNK_ROWS`` (flushed before a columnar chunk, so rows stay in order); a Reject becomes
    a dead-letter row and counts as read and rejected; an Unread becomes a dead-letter row of
    kind ``unread`` and counts in the ``unread_*`` counts only. The counts close the file:
    ``read``, ``rejected_at_read`` and the four of ``UNREAD_COUNTS``, always all six."""
    read = rejected = 0
    unread_bytes = unread_rows = regions = 0
    chunk: list = []
    numbers: list = []
    for event in events:
        kind = type(event)
        if kind is tuple:
            row, record = event
            read += 1
            chunk.append(record)
            numbers.append(row)
            if len(chunk) >= CHUNK_ROWS:
                yield _chunk(path, numbers[0], chunk, numbers)
                chunk, numbers = [], []
            continue
        if kind is Reject:
            read += 1
            rejected += 1
            yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                path, event.row, event.feature, event.reason, event.value, event.record))
            continue
        if kind is Unread:
            regions += 1
            unread_bytes += event.bytes
            unread_rows += event.rows or 0
            yield beam.pvalue.TaggedOutput(REJECTED, unread_letter(path, event))
            continue
        if not isinstance(event, RecordChunk):
            raise TypeError(f"not a reader event: {event!r}")
        if chunk:  # the records before the chunk leave first
            yield _chunk(path, numbers[0], chunk, numbers)
            chunk, numbers = [], []
        read += len(event)
        yield event
    if chunk:
        yield _chunk(path, numbers[0], chunk, numbers)
    read_counter.inc(read)
    rejected_counter.inc(rejected)
    yield beam.pvalue.TaggedOutput(COUNTS, ("read", read))
    yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_read", rejected))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_files", int(regions > 0)))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_bytes", unread_bytes))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_rows", unread_rows))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_regions", regions))


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


def _limit(options: Any) -> int:
    """``source.max_record_bytes`` as the options of a format carry it."""
    return getattr(options, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES)


class _Feed:
    """One row's text at a time for a long-lived ``csv.reader``."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text: str | None = None

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        text, self.text = self.text, None
        if text is None:
            raise StopIteration
        return text


def _csv_cells(options: Any) -> Any:
    """A function from one row's text to its cells (``csv``, strict), raising csv.Error."""
    cc.lift_csv_field_limit()
    feed = _Feed()
    reader = csv.reader(feed, delimiter=options.delimiter, quotechar=options.quotechar,
                        strict=True)

    def cells(text: str) -> list[str]:
        feed.text = text
        try:
            return next(reader)
        except StopIteration:  # pragma: no cover - every row holds at least a line end
            return []

    return cells


def _too_large(row: int, span: cc.RowSpan, limit: int) -> Reject:
    return Reject(row, "", f"row of {span.size} bytes is larger than source.max_record_bytes "
                           f"({limit}); skipped without being read (starts at byte "
                           f"{span.start})", span.head.decode("utf-8", "replace"), "")


def _unterminated(row: int, span: cc.RowSpan) -> Unread:
    return Unread(span.start, span.size, None, row,
                  f"unterminated quoted field: the file ends inside a quoted field opened in "
                  f"row {row}, so its last {span.size} bytes (from byte {span.start}) cannot "
                  f"be split into rows")


class _ReadCsvFile(beam.DoFn):
    """One CSV file -> RecordChunks of typed rows; unparseable rows -> rejected.

    ``columnar``: blocks of rows are split by ``pyarrow.csv`` and typed column-wise into
    RecordBatch chunks (:mod:`csv_columnar`), falling back to the per-row reader for a block
    (or, after quoting on which Arrow and ``csv`` could disagree, the rest of the file)
    wherever the result could differ. Either way the records and dead letters are the same.
    The per-row reader cuts rows with :class:`csv_columnar.RowSplitter` and parses them one
    at a time: a malformed row or one longer than ``max_record_bytes`` (from the options) is
    one dead letter and reading goes on; an unterminated quote makes the rest of the file one
    unread region.
    """

    def __init__(self, options: Any, features: Sequence[FeatureSpec], columnar: bool = True,
                 block_bytes: int = cc.BLOCK_BYTES) -> None:
        self._options = options
        self._features = tuple(features)
        self._columnar = columnar
        self._block_bytes = block_bytes
        self._read = Metrics.counter("sources", "records_read")
        self._rejected = Metrics.counter("sources", "records_rejected_at_parse")

    def process(self, path: str) -> Iterator[Any]:
        opts = self._options
        with storage.open_read(path) as raw:
            if self._columnar and cc.dialect_supported(opts.delimiter, opts.quotechar):
                events = self._columnar_events(path, raw)
            else:
                events = self._row_events(raw, 0, True, None, 0)
            yield from read_outputs(path, events, self._read, self._rejected)

    def _specs(self) -> dict[str, FeatureSpec]:
        """Column -> the spec that types it: the first feature whose source starts there."""
        specs: dict[str, FeatureSpec] = {}
        for spec in self._features:
            specs.setdefault(spec.source[0], spec)
        return specs

    # -- per row ----------------------------------------------------------------------------

    def _row_events(self, raw: Any, offset: int, bom: bool, columns: list[str] | None,
                    row_number: int) -> Iterator[Any]:
        """The events of every row of ``raw`` (which starts at byte ``offset`` of the file;
        a BOM first is dropped when ``bom``), numbered after ``row_number``; reads the header
        first when ``columns`` is None."""
        opts = self._options
        limit = _limit(opts)
        specs = self._specs()
        nulls = set(opts.null_values)
        cells_of = _csv_cells(opts)
        splitter = cc.RowSplitter(raw, opts.quotechar.encode(), opts.delimiter.encode(), limit,
                                  start=offset, strip_bom=bom)
        rows = iter(splitter)
        if columns is None:
            columns = list(opts.columns)
            if opts.header:
                head = next(rows, None)
                if head is None:
                    return
                header, problem = _parse_header(head, cells_of, limit)
                if header is None:
                    end = splitter.drain()
                    yield Unread(splitter.start, end - splitter.start, None, 0,
                                 f"the header {problem}; the file is not read")
                    return
                columns = header
        for row in rows:
            row_number += 1
            if type(row) is not bytes:
                if not row.complete:
                    yield _unterminated(row_number, row)
                    return
                yield _too_large(row_number, row, limit)
                continue
            text = row.decode("utf-8", "surrogateescape")
            try:
                cells = cells_of(text)
            except csv.Error as err:
                yield Reject(row_number, "", f"malformed CSV row: {err}",
                             row.decode("utf-8", "replace"), "")
                continue
            record = _record(row_number, columns, cells, specs, nulls)
            yield (row_number, record) if type(record) is dict else record

    # -- column-wise ------------------------------------------------------------------------

    def _columnar_events(self, path: str, raw: Any) -> Iterator[Any]:
        """The events of ``_row_events`` over the whole file, except that the rows of blocks
        Arrow read arrive as one RecordChunk (``batch`` set) each."""
        opts = self._options
        limit = _limit(opts)
        quote = opts.quotechar.encode()
        blocks = cc.ByteBlocks(raw, quote, self._block_bytes,
                               max(self._block_bytes, min(cc.MAX_PENDING_BYTES, limit)))
        columns = list(opts.columns)
        specs = self._specs()
        state = [0]  # rows read so far
        known: list[str] | None = None if opts.header else columns  # None: header unread
        try:
            if opts.header:
                start = blocks.offset
                head = blocks.first_row()
                if head is None:
                    return
                known = columns = _header(head, opts, limit)
                if columns is None:  # an unusual header: the per-row reader decides
                    stream = io.BufferedReader(cc.Prefixed(head, blocks.rest()))
                    yield from self._rows_from(stream, start, None, state)
                    return
            if (not columns or len(set(columns)) != len(columns)
                    or any(specs[c].shape or specs[c].sequence for c in columns if c in specs)):
                # JSON-array cells (list-shaped features) and duplicate names: per row.
                yield from self._rows_from(blocks.rest(), blocks.offset, columns, state)
                return
            delimiter = opts.delimiter.encode()
            while True:
                start = blocks.offset
                block = blocks.next_block()
                if block is None:
                    return
                if not cc.quoting_is_clean(block, quote, delimiter):
                    # Quote parity may have cut inside a row: csv reads on from this block.
                    stream = io.BufferedReader(cc.Prefixed(block, blocks.rest()))
                    yield from self._rows_from(stream, start, columns, state)
                    return
                chunk, rejects = self._typed_block(path, block, columns, specs, state[0])
                if chunk is None:
                    yield from self._rows_from(io.BytesIO(block), start, columns, state)
                    continue
                yield from rejects
                if len(chunk):
                    yield chunk
                state[0] += len(chunk) + len(rejects)
        except cc.NeedsRows:  # no row end within MAX_PENDING_BYTES
            yield from self._rows_from(blocks.rest(), blocks.offset, known, state)

    def _rows_from(self, stream: Any, offset: int, columns: list[str] | None,
                   state: list[int]) -> Iterator[Any]:
        """``_row_events`` after row ``state[0]``, advancing it."""
        for event in self._row_events(stream, offset, False, columns, state[0]):
            row = event[0] if type(event) is tuple else event.row
            state[0] = max(state[0], row or 0)
            yield event

    def _typed_block(self, path: str, block: bytes, columns: list[str],
                     specs: dict[str, FeatureSpec], before: int) -> tuple[Any, list]:
        """A clean block -> (RecordChunk of its good rows, Rejects), or (None, []) when the
        per-row reader must read it."""
        opts = self._options
        cells = cc.parse_block(block, len(columns), opts.delimiter, opts.quotechar,
                               _limit(opts))
        if cells is None:
            return None, []
        try:
            batch, bad = cc.type_batch(cells, columns, specs, opts.null_values, parse_cell,
                                       CellError)
        except cc.NeedsRows:
            return None, []
        rejects = []
        for index in sorted(bad):
            feature, reason, value = bad[index]
            whole = [cells.column(j)[index].as_py() for j in range(len(columns))]
            rejects.append(Reject(before + 1 + index, feature, reason, value, whole))
        if not bad:
            return RecordChunk(path, before + 1, [], batch=batch), rejects
        good = np.ones(batch.num_rows, bool)
        good[sorted(bad)] = False
        numbers = (np.flatnonzero(good) + before + 1).tolist()
        batch = batch.filter(pa.array(good))
        if not numbers:
            return RecordChunk(path, before + 1, [], batch=batch), rejects
        contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
        return RecordChunk(path, numbers[0], [], () if contiguous else tuple(numbers),
                           batch=batch), rejects


def _parse_header(head: bytes | cc.RowSpan, cells_of: Any,
                  limit: int) -> tuple[list[str] | None, str]:
    """The header row's names, or (None, what is wrong with it)."""
    if type(head) is not bytes:
        if not head.complete:
            return None, "has an unterminated quoted field"
        return None, f"is {head.size} bytes, larger than source.max_record_bytes ({limit})"
    text = head.decode("utf-8", "surrogateescape")
    try:
        header = cells_of(text)
    except csv.Error as err:
        return None, f"is malformed CSV: {err}"
    if _SURROGATE.search("".join(header)):
        bad = _invalid_utf8([f"#{i + 1}" for i in range(len(header))], header, {})[1]
        return None, f"is not valid UTF-8 ({bad.split(': ', 1)[-1]})"
    return header, ""


def read_csv_header(handle: Any, options: Any, limit: int) -> list[str]:
    """The header row of a CSV stream, reading at most about ``limit`` bytes of it (the
    launch-time check of the config; invalid UTF-8 shows as U+FFFD). [] when the stream is
    empty or its first row is longer than ``limit`` or malformed (the reader reports it)."""
    splitter = cc.RowSplitter(_Capped(handle, limit + len(cc.BOM) + 1),
                              options.quotechar.encode(), options.delimiter.encode(), limit,
                              strip_bom=True)
    head = next(iter(splitter), None)
    if type(head) is not bytes:
        return []
    try:
        return _csv_cells(options)(head.decode("utf-8", "replace"))
    except csv.Error:
        return []


class _Capped:
    """The first ``cap`` bytes of a stream, then its end."""

    def __init__(self, handle: Any, cap: int) -> None:
        self._handle = handle
        self._left = cap

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._handle.read(n) if n else b""
        self._left -= len(data)
        return data


def _header(head: bytes, opts: Any, limit: int) -> list[str] | None:
    """The header row's names, or None when the per-row reader should read it (not UTF-8,
    quoting it would reject, longer than ``limit``)."""
    if len(head) > limit:
        return None
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not cc.quoting_is_clean(head, opts.quotechar.encode(), opts.delimiter.encode()):
        return None
    rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=opts.delimiter,
                           quotechar=opts.quotechar, strict=True))
    return rows[0] if len(rows) == 1 else None


def _record(row: int, columns: list[str], cells: list[str], specs: dict[str, FeatureSpec],
            nulls: set) -> dict | Reject:
    """Row ``row``'s cells -> the record, or a Reject.

    Invalid UTF-8 is found first, then a wrong number of cells, then the first cell (in
    column order) that its feature cannot type."""
    joined = "".join(cells)
    if not joined.isascii() and _SURROGATE.search(joined):
        return Reject(row, *_invalid_utf8(columns, cells, specs))
    if len(cells) != len(columns):
        return Reject(row, "", f"malformed line: {len(cells)} cells, the header has "
                             f"{len(columns)}", cells, cells)
    record: dict[str, Any] = {}
    for column, cell in zip(columns, cells):
        spec = specs.get(column)
        if spec is None or cell in nulls:
            record[column] = None if cell in nulls else cell
            continue
        try:
            record[column] = parse_cell(spec, cell)
        except CellError as err:
            return Reject(row, spec.name, f"column {column!r}: {err.reason}", cell, cells)
    return record


def _readable(cells: list[str]) -> list[str]:
    """Cells with invalid bytes shown as U+FFFD, safe to write as JSON."""
    return [cell.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            for cell in cells]


def _invalid_utf8(columns: list[str], cells: list[str],
                  specs: dict[str, FeatureSpec]) -> tuple[str, str, bytes, list[str]]:
    """The dead-letter fields for a row with invalid UTF-8: the first such cell's column."""
    for index, cell in enumerate(cells):
        found = _SURROGATE.search(cell)
        if found is None:
            continue
        column = columns[index] if index < len(columns) else f"#{index + 1}"
        spec = specs.get(column)
        raw = cell.encode("utf-8", "surrogateescape")
        offset = len(cell[:found.start()].encode("utf-8", "surrogateescape"))
        return (spec.name if spec else "",
                f"column {column!r}: not valid UTF-8 (byte 0x{raw[offset]:02x} at byte "
                f"{offset} of the cell)", raw, _readable(cells))
    raise AssertionError("no invalid UTF-8 found")  # pragma: no cover - callers check first


class ReadCsv(beam.PTransform):
    """File paths -> RecordChunks (main output), dead-letter rows (``rejected``) and
    ``counts`` pairs (``read``, ``rejected_at_read``).

    ``columnar`` (default): RecordChunks carry pyarrow RecordBatches of about
    ``block_bytes`` of text each; otherwise Python dicts, row by row. The records, their row
    numbers and the dead letters are the same either way.
    """

    def __init__(self, options: Any, features: Sequence[FeatureSpec], *, columnar: bool = True,
                 block_bytes: int = cc.BLOCK_BYTES) -> None:
        super().__init__()
        self._options = options
        self._features = tuple(features)
        self._columnar = columnar
        self._block_bytes = block_bytes

    def expand(self, paths):
        return (
            paths
            | "SpreadFiles" >> Spread()
            | "ParseCsv" >> beam.ParDo(_ReadCsvFile(self._options, self._features,
                                                    self._columnar, self._block_bytes))
            .with_output_types(RecordChunk).with_outputs(REJECTED, COUNTS, main="records")
        )
