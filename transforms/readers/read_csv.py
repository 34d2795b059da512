"""CSV: its options, its cell parser, the reader of one file, and the public ``ReadCsv``.

Blocks of a file are split by ``pyarrow.csv`` and typed by ``pyarrow.compute``
(:mod:`csv_columnar`) into RecordBatch chunks; any block where that could differ from the
per-row reader (Python's ``csv`` module and :func:`parse_cell`) is read by the per-row reader
instead, so both give the same records, row numbers and dead letters.

Records that cannot even be parsed (a malformed row, a cell that is not a number, a row longer
than ``max_record_bytes``) are dead letters naming the file, the row, the feature and the
reason; they count as read, so read = built + rejected. Input that yields no record at all --
the rest of a file after an unterminated quote, a file whose header cannot be read -- is
*unread*: one dead-letter row of kind ``unread`` per region (byte offset and size) and the
``unread_*`` counts (:func:`framework.read_outputs`).

Cells are typed by the feature specs: an int64 feature accepts integers, ``true``/``false`` and
whole numbers written with a fraction or an exponent (``517.0``, ``1e3``), and -- with ``unit:``
or ``format:`` -- dates and datetimes (:mod:`text_values`);
a float feature decimals, exponents, ``nan`` and ``inf``; a list-shaped feature a JSON array;
null markers (``null_values``) are missing values; a column no feature reads stays text. A row
with invalid UTF-8 is a dead letter naming its column; the rest of the file is still read.

Given ``extra_fields`` (the command line's build passes the split key's column), a record holds
only the columns the features read and those: the other cells are still split and counted -- a
row with a cell too many or too few is still malformed, invalid UTF-8 in any cell still a dead
letter -- but never become values, so a file of 20,000 columns of which three are read takes
about the time of those three. Dead letters still show the whole row.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers import csv_columnar as cc
from beam_tfrecords.transforms.readers.csv_cells import CellError, parse_cell
from beam_tfrecords.transforms.readers.csv_columnar import read_csv_header
from beam_tfrecords.transforms.readers.csv_ranges import IN, OUT, Dialect, csv_range_start
from beam_tfrecords.transforms.readers.csv_typing import type_batch
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES, Reject, Unread
from beam_tfrecords.transforms.readers.framework import (
    ClaimedWindow,
    RangeFound,
    ReadFileFn,
    ReadFiles,
    ReadSource,
    RecordChunk,
    handle_reader,
    listed,
    max_record_bytes_of,
    parse_arguments,
    records_chunk,
    text_plan,
)
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES, Link, RangeError
from beam_tfrecords.transforms.readers.read_parquet import needed_columns
from beam_tfrecords.transforms.readers.source_options import CsvOptions, parse_csv_options

__all__ = ["CsvOptions", "ReadCsv", "ReadCsvFiles", "parse_cell", "parse_csv_options",
           "read_csv_header"]


# -- options ----------------------------------------------------------------------------------

# -- cells and rows ---------------------------------------------------------------------------

_SURROGATE = re.compile("[\udc80-\udcff]")  # invalid UTF-8 bytes, as surrogateescape decodes them
# A row at least this long, of which few columns are kept, is split by cc.pick_cells (numpy)
# rather than csv, which makes a string of every cell.
_PICK_BYTES = 2048


_csv_cells = cc.row_cells


def _too_large(row: int, span: cc.RowSpan, limit: int) -> Reject:
    return Reject(row, "", f"row of {span.size} bytes is larger than source.max_record_bytes "
                           f"({limit}); skipped without being read (starts at byte "
                           f"{span.start})", span.head.decode("utf-8", "replace"), "")


_UNTERMINATED = "unterminated quoted field:"


def _unterminated(row: int, span: cc.RowSpan) -> Unread:
    return Unread(span.start, span.size, None, row,
                  f"{_UNTERMINATED} the file ends inside a quoted field opened in "
                  f"row {row}, so its last {span.size} bytes (from byte {span.start}) cannot "
                  f"be split into rows")


class _ReadCsvFile(ReadFileFn):
    """One CSV file -> RecordChunks of typed rows; unparseable rows -> rejected.

    ``columnar``: blocks of rows are split by ``pyarrow.csv`` and typed column-wise into
    RecordBatch chunks (:mod:`csv_columnar`), falling back to the per-row reader for a block
    (or, after quoting on which Arrow and ``csv`` could disagree, the rest of the file)
    wherever the result could differ. Either way the records and dead letters are the same.
    The per-row reader cuts rows with :class:`csv_columnar.RowSplitter` and parses them one
    at a time: a malformed row or one longer than ``max_record_bytes`` (from the options) is
    one dead letter and reading goes on; an unterminated quote makes the rest of the file one
    unread region.

    ``extra_fields`` None: records hold every column; else only the features' columns and
    those (:meth:`_keep`), and no other cell becomes a value on either path.
    """

    def __init__(self, options: Any, features: Sequence[FeatureSpec] = (),
                 extra_fields: Sequence[str] | None = None, *, columnar: bool = True,
                 block_bytes: int = cc.BLOCK_BYTES) -> None:
        super().__init__(options, features, extra_fields or (), columnar=columnar)
        self._block_bytes = block_bytes
        self._every_column = extra_fields is None

    def events(self, path: str, raw: Any) -> Iterator[Any]:
        raw, foreign = cc.text_stream(raw)
        if foreign is not None:
            return iter([foreign])
        opts = self._options
        if self._columnar and cc.dialect_supported(opts.delimiter, opts.quotechar):
            return self._columnar_events(path, raw)
        return self._row_events(raw, 0, True, None, 0)

    # -- ranges -----------------------------------------------------------------------------

    def plan(self, path: str, size: int, split_bytes: int) -> tuple[int, list[int]] | None:
        planned = text_plan("csv", path, size, split_bytes)
        if planned is not None and self._header_of(path) is None:
            return None  # a header the reader cannot read: the whole file says so, unread
        return planned

    def _header_of(self, path: str, handle: Any = None) -> list[str] | None:
        """The columns of a file's rows (its header's or the options'); None when its header
        cannot be read."""
        opts = self._options
        if not opts.header:
            return list(opts.columns)
        if handle is None:
            with storage.open_read(path) as opened:
                return self._header_of(path, opened)
        handle.seek(0)
        limit = max_record_bytes_of(opts)
        splitter = cc.RowSplitter(handle, opts.quotechar.encode(), opts.delimiter.encode(),
                                  limit, strip_bom=True)
        head = next(iter(splitter), None)
        header = None if head is None else _parse_header(head, _csv_cells(opts), limit)[0]
        return header if header else None

    def range_events(self, path: str, handle: Any, start: int, tracker: Any,
                     found: RangeFound) -> Iterator[Any]:
        """The rows of the range (csv_ranges): from its first row start, as the range's
        start guesses it, to the next range's; its Link says what it assumed at its start and
        found at its end (a row start, or the inside of a quoted field: the parse reached the
        next range's first row inside a quoted field), for ranges.check_links."""
        opts = self._options
        read_at = handle_reader(handle)
        columns = self._header_of(path, handle)
        if columns is None:  # planned with a readable header: the file changed since
            raise RangeError(f"{path}: byte 0: its header cannot be read any more")
        dialect = Dialect.of(opts)

        def first_of(offset: int) -> int:
            return csv_range_start(read_at, offset, dialect, ncols=len(columns)).first

        first = 0 if not start else first_of(start)
        found.range_offset = first
        window = ClaimedWindow(handle, first, tracker, first_of)
        stream = io.BufferedReader(window, 1 << 20)
        if not start:
            events = self.events(path, stream)
        elif self._columnar and cc.dialect_supported(opts.delimiter, opts.quotechar):
            events = self._columnar_events(path, stream, columns, first)
        else:
            events = self._row_events(stream, first, False, columns, 0)
        inside = False
        for event in events:
            if (type(event) is Unread and event.offset + event.bytes == window.end_at
                    and event.reason.startswith(_UNTERMINATED)
                    and read_at(event.offset + event.bytes, 1)):
                inside = True  # not the file's end: the next range starts inside quotes
                continue
            yield event
        end = window.end_at if window.end_at is not None else first
        found.link = Link(first, OUT if start else None, max(end, first),
                          IN if inside else OUT)

    def _specs(self) -> dict[str, FeatureSpec]:
        """Column -> the spec that types it: the first feature whose source starts there."""
        specs: dict[str, FeatureSpec] = {}
        for spec in self._features:
            specs.setdefault(spec.source[0], spec)
        return specs

    def _keep(self, columns: list[str]) -> list[int] | None:
        """The indices of the columns records hold, in file order: those the features read
        (a dotted source also names its literal column) and ``extra_fields`` name, or the
        first column when none is (a batch without columns would have no rows); None for
        every column (no ``extra_fields`` given, or every column is named)."""
        if self._every_column:
            return None
        named = set(needed_columns(self._features, self._extra))
        keep = [i for i, column in enumerate(columns) if column in named] or [0]
        return None if len(keep) == len(columns) else keep

    # -- per row ----------------------------------------------------------------------------

    def _row_events(self, raw: Any, offset: int, bom: bool, columns: list[str] | None,
                    row_number: int) -> Iterator[Any]:
        """The events of every row of ``raw`` (which starts at byte ``offset`` of the file;
        a BOM first is dropped when ``bom``), numbered after ``row_number``; reads the header
        first when ``columns`` is None."""
        opts = self._options
        limit = max_record_bytes_of(opts)
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
        keep = self._keep(columns)
        kept = columns if keep is None else [columns[i] for i in keep]
        quote, delimiter = opts.quotechar.encode(), opts.delimiter.encode()
        for row in rows:
            row_number += 1
            if type(row) is not bytes:
                if not row.complete:
                    yield _unterminated(row_number, row)
                    return
                yield _too_large(row_number, row, limit)
                continue
            if keep is not None and len(row) >= _PICK_BYTES:
                picked = cc.pick_cells(row, keep, len(columns), quote, delimiter)
                if picked is not None:
                    record = _record(row_number, kept, picked, specs, nulls)
                    if type(record) is dict:
                        yield row_number, record
                        continue
                    # Rejected: csv splits the row again, so the dead letter shows every cell.
            text = row.decode("utf-8", "surrogateescape")
            try:
                cells = cells_of(text)
            except csv.Error as err:
                yield Reject(row_number, "", f"malformed CSV row: {err}",
                             row.decode("utf-8", "replace"), "")
                continue
            record = _record(row_number, columns, cells, specs, nulls, keep)
            yield (row_number, record) if type(record) is dict else record

    # -- column-wise ------------------------------------------------------------------------

    def _columnar_events(self, path: str, raw: Any, given: list[str] | None = None,
                         offset: int = 0) -> Iterator[Any]:
        """The events of ``_row_events`` over the whole file, except that the rows of blocks
        Arrow read arrive as one RecordChunk (``batch`` set) each. ``given``: the columns of
        a stream that starts at row start ``offset`` inside the file (a range's), no header."""
        opts = self._options
        limit = max_record_bytes_of(opts)
        quote = opts.quotechar.encode()
        blocks = cc.ByteBlocks(raw, quote, self._block_bytes,
                               max(self._block_bytes, min(cc.MAX_PENDING_BYTES, limit)),
                               offset)
        columns = list(opts.columns) if given is None else given
        header = opts.header and given is None
        specs = self._specs()
        state = [0]  # rows read so far
        known: list[str] | None = None if header else columns  # None: header unread
        try:
            if header:
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
            keep = self._keep(columns)
            parser = cc.BlockParser(len(columns), opts.delimiter, opts.quotechar, limit, keep)
            if keep is not None:  # blocks of about block_bytes of the kept columns' text
                blocks.grow(min(max(self._block_bytes, cc.WIDE_BLOCK_BYTES),
                                self._block_bytes * len(columns) // len(keep)))
            kept = columns if keep is None else [columns[i] for i in keep]
            cells_of = _csv_cells(opts)
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
                chunk, rejects = self._typed_block(path, block, parser, kept, specs,
                                                   state[0], cells_of)
                if chunk is None:
                    yield from self._rows_from(io.BytesIO(block), start, columns, state)
                    continue
                if len(chunk):  # a block's good rows before its rejects (sinks/early_stop.py)
                    yield chunk
                yield from rejects
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

    def _typed_block(self, path: str, block: bytes, parser: cc.BlockParser,
                     columns: list[str], specs: dict[str, FeatureSpec], before: int,
                     cells_of: Any) -> tuple[Any, list]:
        """A clean block -> (RecordChunk of its good rows, in the columns ``parser`` keeps,
        named ``columns``; Rejects), or (None, []) when the per-row reader must read it."""
        opts = self._options
        cells = parser.parse(block)
        if cells is None:
            return None, []
        try:
            batch, bad = type_batch(cells, columns, specs, opts.null_values, parse_cell,
                                    CellError)
        except cc.NeedsRows:
            return None, []
        if bad and len(columns) < parser.ncols:
            # A dead letter shows every cell of its row; the batch holds the kept columns
            # only, so csv splits the rejected rows' text again.
            rejects = _rejects_from_text(block, cells.num_rows, bad, before, opts.quotechar,
                                         cells_of)
            if rejects is None:  # pragma: no cover - clean blocks are cut alike
                return None, []
        else:
            order = sorted(bad)
            taken = pa.array(order, pa.int64())  # the rejected rows' cells, column by column
            wholes = zip(*(cells.column(j).take(taken).to_pylist() for j in range(len(columns))))
            rejects = [Reject(before + 1 + index, *bad[index], list(whole))
                       for index, whole in zip(order, wholes)]
        if not bad:
            return RecordChunk(path, before + 1, [], batch=batch), rejects
        good = np.ones(batch.num_rows, bool)
        good[sorted(bad)] = False
        numbers = (np.flatnonzero(good) + before + 1).tolist()
        batch = batch.filter(pa.array(good))
        if not numbers:
            return RecordChunk(path, before + 1, [], batch=batch), rejects
        return records_chunk(path, [], numbers, batch), rejects


def _rejects_from_text(block: bytes, rows: int, bad: dict[int, tuple[str, str, str]],
                       before: int, quotechar: str, cells_of: Any) -> list[Reject] | None:
    """The Rejects of the rows ``bad`` (index -> feature, reason, cell) of a clean block
    of ``rows`` rows, each with every cell of its row as csv splits it; None when the block
    does not cut into ``rows`` rows."""
    ends = cc.row_ends(block, quotechar.encode())
    if len(ends) != rows:
        return None
    rejects = []
    for index in sorted(bad):
        text = block[int(ends[index - 1]) if index else 0:int(ends[index])].decode("utf-8")
        rejects.append(Reject(before + 1 + index, *bad[index], cells_of(text)))
    return rejects


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
            nulls: set, keep: list[int] | None = None) -> dict | Reject:
    """Row ``row``'s cells -> the record of the columns ``keep`` (indices; None: all), or a
    Reject.

    Invalid UTF-8 (in any cell) is found first, then a wrong number of cells, then the first
    cell (in column order) that its feature cannot type."""
    joined = "".join(cells)
    if not joined.isascii() and _SURROGATE.search(joined):
        return Reject(row, *_invalid_utf8(columns, cells, specs))
    if len(cells) != len(columns):
        return Reject(row, "", f"malformed line: {len(cells)} cells, the header has "
                             f"{len(columns)}", cells, cells)
    record: dict[str, Any] = {}
    pairs = zip(columns, cells) if keep is None else ((columns[i], cells[i]) for i in keep)
    for column, cell in pairs:
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



# -- transforms -------------------------------------------------------------------------------

class ReadCsvFiles(ReadFiles):
    """CSV file paths -> RecordChunks (main ``records``), dead-letter rows (``rejected``) and
    ``counts`` pairs, with :class:`CsvOptions` and FeatureSpecs; with ``extra_fields`` (even
    empty), records hold only the columns the features read and those.

    ``columnar`` (default): RecordChunks carry pyarrow RecordBatches of about
    ``block_bytes`` of text each; otherwise Python dicts, row by row. The records, their row
    numbers and the dead letters are the same either way.

    Args:
        options: the source's CSV options.
        features: the features to read.
        extra_fields: other columns to keep; None keeps every column.
        knobs: ``columnar``, ``batch_rows``, ``block_bytes``, ``split_bytes``.
    """

    _fn = _ReadCsvFile
    _label = "ParseCsv"

    def __init__(self, options: Any, features: Sequence[FeatureSpec] = (),
                 extra_fields: Sequence[str] | None = None, **knobs: Any) -> None:
        super().__init__(options, features, extra_fields, **knobs)  # None: every column


class ReadCsv(ReadSource):
    """Reads CSV files into typed records: ``p | btf.ReadCsv("gs://b/*.csv", features=...)``.

    Args:
      file_pattern: a glob on any Beam filesystem, or a list of paths (see ReadSource).
      features: the config's ``features:`` mapping (plain dicts) or FeatureSpecs. Required:
        CSV cells are text, and the features type them (an int64 column accepts integers,
        true/false and whole numbers such as ``517.0`` -- with ``unit:`` or ``format:`` also
        dates and datetimes --, a float column numbers, nan and inf, a list-shaped one a JSON
        array).
      delimiter: the one-character cell separator.
      quotechar: the one-character quote.
      header: whether the first row names the columns.
      columns: the column names, required when ``header`` is false.
      null_values: cells spelled like this are missing values.
      max_record_bytes: the longest row held in memory (bytes, or a size such as "64MiB");
        a longer one is a dead letter.
      extra_fields: columns to keep besides those the features read, e.g. the split key's
        when no feature reads it (``splits={"key": "id", ...}``). Given (even empty), records
        hold only those columns and the features'; the other cells are still split -- a row
        with a cell too many is still malformed -- but never become values, so a wide file
        reads in about the time of its named columns. None (the default): every column, as
        text where no feature types it.
      split_bytes: a file larger than this (bytes, or a size such as "64MiB") is read as
        ranges of about this size that workers share (default 64 MiB).

    Returns a dict of PCollections, also readable as attributes: ``records`` (chunks of
    records), ``rejected`` (dead-letter dicts) and ``counts``; apply ``btf.ToExamples`` or
    ``btf.WriteTFRecordDataset`` to the whole result. A bad argument raises an error naming it.
    """

    _files = ReadCsvFiles

    def __init__(self, file_pattern: str | Sequence[str], features: Any, *,
                 delimiter: str = ",", quotechar: str = '"', header: bool = True,
                 columns: Sequence[str] = (), null_values: Sequence[str] = ("",),
                 max_record_bytes: int | str = DEFAULT_MAX_RECORD_BYTES,
                 split_bytes: int | str = DEFAULT_SPLIT_BYTES,
                 extra_fields: Sequence[str] | None = None) -> None:
        raw = {"delimiter": delimiter, "quotechar": quotechar, "header": header,
               "null_values": listed(null_values)}
        if columns:  # none: the header names them
            raw["columns"] = listed(columns)
        super().__init__(file_pattern, features, parse_arguments(
            "ReadCsv", parse_csv_options, raw, max_record_bytes),
            () if extra_fields is None else extra_fields, split_bytes)
        if extra_fields is None:  # ReadSource checked the rest; None means every column
            self.extra_fields = None
            self._reader = self._files(self.options, self.features, None,
                                       split_bytes=self.split_bytes)
