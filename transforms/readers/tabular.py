"""JSON Lines, Parquet and Avro readers with the contract of :class:`sources.ReadCsv`.

Each reader turns a PCollection of file paths into

* ``records`` (main): :class:`sources.RecordChunk` s -- on the columnar path (the default)
  each holds a ``pyarrow.RecordBatch`` of up to ``batch_rows`` rows (Parquet: the needed
  columns as stored; JSON Lines: blocks of flat scalar objects that ``pyarrow.json`` reads
  exactly as ``json`` would, the other lines as dicts), otherwise (``columnar=False``, and
  always for Avro) at most ``CHUNK_ROWS`` Python dicts; ``chunk.records()`` gives the same
  dicts either way;
* ``rejected``: dead-letter rows (:func:`sources.dead_letter`) for what cannot be read;
* ``counts``: exactly one ``("read", n)`` and one ``("rejected_at_read", n)`` per file, where
  ``read`` counts every record, the rejected ones included.

Values keep their natural Python form: nested objects/structs/records are dicts, arrays are
lists, nulls are None, Parquet and Avro timestamps and dates are ``datetime`` / ``date``
objects, Avro and Parquet binary stays ``bytes``. The encoder's dotted ``source`` paths reach
into the nested values; the coercion policy types them.

Row numbers are 1-based: the physical line for JSON Lines (blank lines are skipped and not
counted as records, but they do advance the line number), the row (record) index across the
file for Parquet and Avro.

Damage is *unread input* (:class:`read_events.Unread`: one dead-letter row of kind
``unread`` with the byte offset, the bytes and, where the format says, the records lost; and
the ``unread_*`` counts), never a silent loss and never a crash:

* Parquet: a file whose footer cannot be read is unread as a whole (its size in bytes, rows
  unknown); a row group that fails part way loses the rest of that group only (its rows
  known from the footer, its byte span the group's), and the next group is read. Pages
  written with checksums are verified.
* Avro: the container's framing is parsed here (header: magic, metadata, sync marker;
  blocks: record count, size, data, sync marker) and each block is decoded by ``fastavro``
  on its own, so a damaged block (bad data, a damaged sync marker, a wrong size) costs that
  block only: reading goes on at the next sync marker, and the block's records are counted
  as lost (its header's count). Without a later sync marker the rest of the file is unread.
  A block larger than ``max_record_bytes`` is skipped unread without being held.

Parquet reads only the top-level columns the features need (plus ``extra_fields``, e.g. the
split key's column), when the features are known; JSON Lines and Avro records keep every
field. JSON Lines text is streamed line by line: a line longer than ``source.max_record_bytes``
(``max_line_bytes``, its older name) or nested deeper than ``max_depth`` is a dead letter,
never a memory blow-up or RecursionError; reading goes on at the next line.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.spread import Spread
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers.csv_columnar import Prefixed
from beam_tfrecords.transforms.readers.events import (
    DEFAULT_MAX_RECORD_BYTES,
    PREVIEW_BYTES,
    Reject,
    Unread,
    bounded_line,
)
from beam_tfrecords.transforms.readers.framework import (
    BATCH_BYTES,
    BATCH_ROWS,
    CHUNK_ROWS,
    COUNTS,
    REJECTED,
    RecordChunk,
    read_outputs,
)

__all__ = [
    "AvroOptions",
    "JsonlOptions",
    "ParquetOptions",
    "ReadAvro",
    "ReadJsonl",
    "ReadParquet",
    "needed_columns",
    "parse_avro_options",
    "parse_jsonl_options",
    "parse_parquet_options",
    "top_level_fields",
]

_BOM = b"\xef\xbb\xbf"
_JSONL_BLOCK = 1 << 20  # bytes of whole lines per pyarrow.json block
_MAX_DEPTH_LIMIT = 512  # json's C parser raises RecursionError somewhat below 1000 levels


# -- options ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JsonlOptions:
    """How JSON Lines text is read.

    ``max_depth``: a line whose objects/arrays nest deeper than this (the line's object is
    level 1) is a dead letter. ``max_line_bytes``: a longer physical line is a dead letter
    and is skipped without being held in memory (the config sets it from
    ``source.max_record_bytes``; ``source.jsonl.max_line_bytes`` is that key's older name).
    """

    max_depth: int = 64
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES

    @property
    def max_record_bytes(self) -> int:
        return self.max_line_bytes


@dataclasses.dataclass(frozen=True)
class ParquetOptions:
    """Parquet has no options of its own; ``max_record_bytes`` (from
    ``source.max_record_bytes``) bounds the footer a reader will hold."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES


@dataclasses.dataclass(frozen=True)
class AvroOptions:
    """Avro has no options of its own; ``max_record_bytes`` (from
    ``source.max_record_bytes``) bounds the header and the blocks a reader will hold."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES


def _fail(key: str, value: Any, reason: str) -> ValueError:
    shown = json.dumps(value, default=repr)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return ValueError(f"config key {key!r}: {reason} (got {shown})")


def _section(key: str, raw: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise _fail(key, raw, "must be a mapping")
    for name in raw:
        if name not in allowed:
            where = ", ".join(allowed) if allowed else "nothing (no options yet)"
            raise _fail(f"{key}.{name}", raw[name], f"unknown key; allowed here: {where}")
    return raw


def _int_in(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(key, value, f"must be an integer from {low} to {high}")
    return value


def parse_jsonl_options(raw: Any, key: str = "source.jsonl") -> JsonlOptions:
    """The ``source.jsonl`` mapping (None: defaults) as :class:`JsonlOptions`."""
    raw = _section(key, raw, ("max_depth", "max_line_bytes"))
    opts: dict[str, int] = {}
    if "max_depth" in raw:
        opts["max_depth"] = _int_in(f"{key}.max_depth", raw["max_depth"], 1, _MAX_DEPTH_LIMIT)
    if "max_line_bytes" in raw:
        opts["max_line_bytes"] = _int_in(f"{key}.max_line_bytes", raw["max_line_bytes"], 1,
                                         2**40)
    return JsonlOptions(**opts)


def parse_parquet_options(raw: Any, key: str = "source.parquet") -> ParquetOptions:
    """The ``source.parquet`` mapping (None: defaults) as :class:`ParquetOptions`."""
    _section(key, raw, ())
    return ParquetOptions()


def parse_avro_options(raw: Any, key: str = "source.avro") -> AvroOptions:
    """The ``source.avro`` mapping (None: defaults) as :class:`AvroOptions`."""
    _section(key, raw, ())
    return AvroOptions()


def needed_columns(features: Sequence[FeatureSpec], extra: Sequence[str] = ()) -> list[str]:
    """Top-level fields the features read (plus ``extra``, e.g. the split key's first part).

    A dotted source also names its literal column (``meta.label``), which ``lookup`` accepts.
    """
    names: dict[str, None] = {}
    for spec in features:
        names[spec.source[0]] = None
        if len(spec.source) > 1:
            names[".".join(spec.source)] = None
            names["/".join(spec.source)] = None
    for name in extra:
        names[name] = None
    return list(names)


def top_level_fields(fmt: str, path: str,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The top-level field names a Parquet or Avro file declares (None for JSON Lines, whose
    records need not share fields), to validate a config before the pipeline runs. Reads at
    most about ``max_record_bytes`` of a footer or header (a larger one raises ValueError)."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with storage.open_read(path) as handle:
            _check_parquet_footer(handle, max_record_bytes)
            return list(pq.ParquetFile(handle).schema_arrow.names)
    if fmt == "avro":
        with storage.open_read(path) as handle:
            schema = _AvroFile(handle, max_record_bytes).read_header().schema
        if isinstance(schema, Mapping) and schema.get("type") == "record":
            return [field["name"] for field in schema.get("fields", ())]
        return []
    return None


def _limit(options: Any) -> int:
    return getattr(options, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES)


# -- the shared per-file DoFn -----------------------------------------------------------------

class _ReadFileFn(beam.DoFn):
    """One file -> RecordChunks, rejects and counts; subclasses parse with ``_items``.

    ``_items(path, handle)`` yields the events of :mod:`read_events`: ``(row, record)``
    for a good record, a :class:`Reject` for one that cannot be read, an :class:`Unread` for
    input no record came from, and, on the columnar path (``columnar``), whole
    :class:`RecordChunk` s with ``batch`` set.
    """

    def __init__(self, options: Any, features: Sequence[FeatureSpec],
                 extra_fields: Sequence[str] = (), columnar: bool = True,
                 batch_rows: int = BATCH_ROWS) -> None:
        self._options = options
        self._features = tuple(features)
        self._extra = tuple(extra_fields)
        self._columnar = columnar
        self._batch_rows = batch_rows
        self._read = Metrics.counter("sources", "records_read")
        self._rejected = Metrics.counter("sources", "records_rejected_at_parse")

    def _items(self, path: str, handle: Any) -> Iterator[Any]:
        raise NotImplementedError

    def process(self, path: str) -> Iterator[Any]:
        with storage.open_read(path) as handle:
            yield from read_outputs(path, self._items(path, handle), self._read, self._rejected)


class _ReadTransform(beam.PTransform):
    """``columnar`` (default): formats with a columnar path emit RecordChunks holding
    RecordBatches of up to ``batch_rows`` rows; otherwise (and for Avro) dicts, row by row.
    The records, their row numbers and the dead letters are the same either way."""

    _fn: type[_ReadFileFn]
    _label: str

    def __init__(self, options: Any, features: Sequence[FeatureSpec],
                 extra_fields: Sequence[str] = (), *, columnar: bool = True,
                 batch_rows: int = BATCH_ROWS) -> None:
        super().__init__()
        self._options = options
        self._features = tuple(features)
        self._extra = tuple(extra_fields)
        self._columnar = columnar
        self._batch_rows = batch_rows

    def expand(self, paths):
        return (
            paths
            | "SpreadFiles" >> Spread()
            | self._label >> beam.ParDo(self._fn(self._options, self._features, self._extra,
                                                 self._columnar, self._batch_rows))
            .with_output_types(RecordChunk).with_outputs(REJECTED, COUNTS, main="records")
        )


# -- JSON Lines -------------------------------------------------------------------------------

def _too_deep(value: Any, limit: int) -> bool:
    """Whether dicts/lists in ``value`` nest deeper than ``limit`` (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return False


class _ReadJsonlFile(_ReadFileFn):
    """JSON Lines, line by line with ``json``; or (``columnar``) blocks of whole lines parsed
    by ``pyarrow.json`` where the result is provably the same (see ``_block_items``)."""

    def _items(self, path: str, handle: Any) -> Iterator[Any]:
        if self._columnar:
            yield from self._columnar_items(path, handle)
        else:
            yield from self._line_items(handle, 0)

    def _line_items(self, handle: Any, line_number: int) -> Iterator[Any]:
        """Every line of ``handle``, numbered after ``line_number``; long lines are skipped
        without being held."""
        limit = self._options.max_line_bytes
        while True:
            line, size = bounded_line(handle, limit)
            if not size:
                return
            line_number += 1
            if size > limit:
                yield Reject(line_number, "", f"line of {size} bytes is longer than "
                                              f"source.max_record_bytes ({limit})",
                             line[:PREVIEW_BYTES], "")
                continue
            event = self._line_event(line_number, line)
            if event is not None:
                yield event

    def _line_event(self, line_number: int, line: bytes) -> Any:
        """One line (at most max_line_bytes) -> its event; None for a blank line."""
        max_depth = self._options.max_depth
        if line_number == 1 and line.startswith(_BOM):
            line = line[len(_BOM):]
        if not line.strip():  # blank: not a record, not counted
            return None
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            return Reject(line_number, "", f"invalid UTF-8 at byte {err.start}: {err.reason}",
                          line[max(0, err.start - 20):err.start + 20], line)
        # Cheap guard first: a line with few brackets cannot nest deeply.
        maybe_deep = text.count("{") + text.count("[") > max_depth
        try:
            record = json.loads(text)
        except RecursionError:
            return Reject(line_number, "", f"nested deeper than max_depth ({max_depth})",
                          text, text)
        except ValueError as err:
            return Reject(line_number, "", f"not valid JSON: {err}", text, text)
        if not isinstance(record, dict):
            return Reject(line_number, "", f"not a JSON object: a {type(record).__name__}; "
                                           "each line must hold one object", record, text)
        if maybe_deep and _too_deep(record, max_depth):
            return Reject(line_number, "", f"nested deeper than max_depth ({max_depth})",
                          text, text)
        return line_number, record

    def _columnar_items(self, path: str, handle: Any) -> Iterator[Any]:
        limit = self._options.max_line_bytes
        line = 0  # lines before ``pending``
        pending = b""
        while True:
            data = handle.read(_JSONL_BLOCK)
            buf = pending + data
            if data:
                cut = buf.rfind(b"\n") + 1
                if not cut:
                    if len(buf) > limit:  # a long line: the streaming reader skips it
                        rest = io.BufferedReader(Prefixed(buf, handle))
                        yield from self._line_items(rest, line)
                        return
                    pending = buf
                    continue
                block, pending = buf[:cut], buf[cut:]
            else:
                block, pending = buf, b""
            if block:
                if line == 0 and block.startswith(_BOM):  # line 1 keeps its own rules
                    end = block.find(b"\n") + 1 or len(block)
                    yield from self._line_items(io.BytesIO(block[:end]), 0)
                    block, line = block[end:], 1
                yield from self._block_items(path, block, line)
                line += block.count(b"\n") + (bool(block) and not block.endswith(b"\n"))
            if not data:
                return

    def _block_items(self, path: str, block: bytes, line: int) -> Iterator[Any]:
        """Whole lines (numbered after ``line``) -> a RecordChunk of the rows Arrow read
        exactly as ``json`` would, and per-line events for the others.

        Arrow's result is used only for flat objects of int64 / float64 / string / bool
        values with every line one object and no line over max_line_bytes; a row with a
        null (missing and null look alike in Arrow), a float that is integral (``1`` and
        ``1.0`` look alike) or not finite goes through ``json``; anything Arrow refuses
        sends the whole block there. Arrow's float parsing rounds correctly, as ``float``.
        """
        if not block:
            return
        import pyarrow as pa

        table = _arrow_json(block)
        data = np.frombuffer(block, np.uint8)
        ends = np.flatnonzero(data == 0x0A) + 1  # exclusive ends, newline included
        if not block.endswith(b"\n"):
            ends = np.append(ends, len(block))
        starts = np.concatenate(([0], ends[:-1]))
        if table is None or np.any(ends - starts > self._options.max_line_bytes):
            yield from self._line_items(io.BytesIO(block), line)
            return
        if np.all(data[starts] == 0x7B):  # every line starts with "{": none is blank
            records = np.arange(len(starts))
        else:  # a line of only bytes.strip() whitespace is blank (not a record)
            blank_bytes = np.isin(data, np.frombuffer(b" \t\n\r\x0b\x0c", np.uint8))
            solid = np.concatenate(([0], np.cumsum(~blank_bytes)))
            records = np.flatnonzero(solid[ends] - solid[starts] > 0)  # line indices
        # Arrow succeeded, so each non-blank line holds at least one object: equal counts
        # mean exactly one each.
        if len(records) != table.num_rows:
            yield from self._line_items(io.BytesIO(block), line)
            return
        slow = np.zeros(table.num_rows, bool)
        for column in table.columns:
            if column.null_count:
                slow |= column.is_null().to_numpy(zero_copy_only=False)
            if pa.types.is_floating(column.type):
                values = column.to_numpy()
                with np.errstate(invalid="ignore"):
                    slow |= ~np.isfinite(values) | (values == np.floor(values))
        numbers = records + line + 1
        for index in np.flatnonzero(slow).tolist():
            event = self._line_event(int(numbers[index]),
                                     block[starts[records[index]]:ends[records[index]]])
            if event is not None:
                yield event
        if slow.all():
            return
        if slow.any():
            table = table.filter(pa.array(~slow))
            numbers = numbers[~slow]
        batch = table.combine_chunks().to_batches()[0]
        contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
        yield RecordChunk(path, int(numbers[0]), [],
                          () if contiguous else tuple(numbers.tolist()), batch=batch)


def _arrow_json(block: bytes) -> Any:
    """``block`` read by pyarrow.json as a table of flat scalar columns, or None."""
    import pyarrow as pa
    import pyarrow.json as pajson

    if block.startswith(_BOM):  # Arrow drops it; json refuses it after line 1
        return None
    if not block.isascii():
        try:
            block.decode("utf-8")  # Arrow's JSON reader does not check
        except UnicodeDecodeError:
            return None
    read_options = pajson.ReadOptions(use_threads=False, block_size=len(block) + 1)
    try:
        table = pajson.read_json(io.BytesIO(block), read_options=read_options)
        stamps = [f.name for f in table.schema if pa.types.is_timestamp(f.type)]
        if stamps:  # Arrow reads ISO 8601 strings as timestamps; json keeps strings
            explicit = pa.schema([(name, pa.string()) for name in stamps])
            table = pajson.read_json(io.BytesIO(block), read_options=read_options,
                                     parse_options=pajson.ParseOptions(
                                         explicit_schema=explicit,
                                         unexpected_field_behavior="infer"))
    except Exception:  # noqa: BLE001 - anything Arrow refuses is json's to judge
        return None
    scalar = (pa.types.is_int64, pa.types.is_float64, pa.types.is_string, pa.types.is_boolean)
    if table.num_columns == 0 or not all(any(ok(f.type) for ok in scalar)
                                         for f in table.schema):
        return None
    return table


class ReadJsonl(_ReadTransform):
    """JSON Lines file paths -> RecordChunks of dicts (main ``records``), dead-letter rows
    (``rejected``) and ``counts`` pairs (``read``, ``rejected_at_read``)."""

    _fn = _ReadJsonlFile
    _label = "ParseJsonl"


# -- Parquet ----------------------------------------------------------------------------------

def _check_parquet_footer(handle: Any, limit: int) -> int:
    """The file's size, after checking that its footer (as its last 8 bytes declare it) is
    at most ``limit`` bytes; pyarrow would read a declared 4 GB footer whole."""
    size = handle.seek(0, io.SEEK_END)
    if size >= 12:
        handle.seek(size - 8)
        tail = handle.read(8)
        declared = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and declared > limit:
            raise ValueError(f"its footer is {declared} bytes, larger than "
                             f"source.max_record_bytes ({limit})")
    handle.seek(0)
    return size


def _group_span(group: Any) -> tuple[int, int]:
    """(first byte, bytes) of a row group's column chunks, from the footer."""
    starts, ends = [], []
    for index in range(group.num_columns):
        column = group.column(index)
        first = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset:
            first = min(first, column.dictionary_page_offset)
        starts.append(first)
        ends.append(first + column.total_compressed_size)
    if not starts:
        return 0, 0
    return min(starts), max(ends) - min(starts)


class _ReadParquetFile(_ReadFileFn):
    def _items(self, path: str, handle: Any) -> Iterator[Any]:
        import pyarrow.parquet as pq

        size = 0
        try:
            size = _check_parquet_footer(handle, _limit(self._options))
            parquet = pq.ParquetFile(handle, page_checksum_verification=True)
            columns = None
            if self._features:
                present = set(parquet.schema_arrow.names)
                columns = [c for c in needed_columns(self._features, self._extra)
                           if c in present]
            meta = parquet.metadata
            groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
            sizes = [group.num_rows for group in groups]
            spans = [_group_span(group) for group in groups]
        except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
            yield Unread(0, size, None, None,
                         f"not a readable Parquet file ({type(err).__name__}: {err}); the "
                         f"whole file ({size} bytes) is unread")
            return
        # Row group by row group: a damaged group costs its own rows only (the footer still
        # says where the next one starts).
        pending = _Batches(path, self._batch_rows) if self._columnar else None
        start = 0  # rows before this group
        for group, rows in enumerate(sizes):
            row = start
            try:
                batches = parquet.iter_batches(batch_size=CHUNK_ROWS, row_groups=[group],
                                               columns=columns)
            except Exception as err:  # noqa: BLE001
                batches, failure = iter(()), err
            else:
                failure = None
            while failure is None:
                try:
                    batch = next(batches, None)
                    records = (None if batch is None or pending is not None
                               else batch.to_pylist())
                except Exception as err:  # noqa: BLE001 - corrupt or truncated data
                    failure = err
                    break
                if batch is None:
                    break
                if pending is not None:
                    yield from pending.add(row + 1, batch)
                    row += batch.num_rows
                    continue
                for record in records:
                    row += 1
                    yield row, record
            if failure is not None:
                if pending is not None:
                    yield from pending.flush()
                # The group's whole byte span: exact when none of its rows were read, an
                # upper bound when the damage came after some of them.
                offset, length = spans[group]
                lost = start + rows - row
                yield Unread(offset, length, lost, row + 1,
                             f"unreadable Parquet data in row group {group} (rows "
                             f"{start + 1}-{start + rows}): rows {row + 1}-{start + rows} are "
                             f"lost, reading goes on with the next group: "
                             f"{type(failure).__name__}: {failure}")
            start += rows
        if pending is not None:
            yield from pending.flush()


class _Batches:
    """Consecutive RecordBatches of one file gathered into RecordChunks of up to
    ``max_rows`` rows (or ``BATCH_BYTES``), so small row groups still make large chunks."""

    def __init__(self, path: str, max_rows: int) -> None:
        self._path = path
        self._max_rows = max_rows
        self._batches: list = []
        self._first = 0
        self._rows = self._bytes = 0

    def add(self, first_row: int, batch: Any) -> Iterator[RecordChunk]:
        if self._batches and first_row != self._first + self._rows:
            yield from self.flush()  # not contiguous: a chunk's rows always are
        if not self._batches:
            self._first = first_row
        self._batches.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= self._max_rows or self._bytes >= BATCH_BYTES:
            yield from self.flush()

    def flush(self) -> Iterator[RecordChunk]:
        import pyarrow as pa

        batches, first = self._batches, self._first
        self._batches, self._rows, self._bytes = [], 0, 0
        if len(batches) > 1:
            batches = pa.Table.from_batches(batches).combine_chunks().to_batches()
        for batch in batches:
            if batch.num_rows:
                yield RecordChunk(self._path, first, [], batch=batch)
                first += batch.num_rows


class ReadParquet(_ReadTransform):
    """Parquet file paths -> RecordChunks of dicts; reads only the top-level columns the
    features (and ``extra_fields``, e.g. the split key) name, when the features are known."""

    _fn = _ReadParquetFile
    _label = "ParseParquet"


# -- Avro -------------------------------------------------------------------------------------

_AVRO_MAGIC = b"Obj\x01"
_SYNC = 16


class _AvroDamage(Exception):
    """The bytes at hand are not what the container format says must be there."""


def _zigzag(value: int) -> bytes:
    """An Avro long: zigzag, then a base-128 varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@dataclasses.dataclass
class _AvroHeader:
    schema: Any
    codec: str
    sync: bytes
    prefix: bytes  # a container header that hands one block to fastavro: codec null or ours


class _AvroFile:
    """An Avro object container file read block by block, holding at most about
    ``limit`` bytes (a header, a block) at a time; ``pos`` is the offset of the next byte."""

    def __init__(self, handle: Any, limit: int) -> None:
        self._handle = handle
        self._limit = limit
        self._buf = b""
        self.pos = 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the file)."""
        if len(self._buf) < n:
            parts = [self._buf]
            have = len(self._buf)
            while have < n:
                data = self._handle.read(max(n - have, 1 << 16))
                if not data:
                    break
                parts.append(data)
                have += len(data)
            self._buf = b"".join(parts)
        data, self._buf = self._buf[:n], self._buf[n:]
        self.pos += len(data)
        return data

    def unread(self, data: bytes) -> None:
        """Put ``data`` (just read) back in front."""
        self._buf = data + self._buf
        self.pos -= len(data)

    def exact(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) < n:
            raise _AvroDamage(f"the file ends {n - len(data)} bytes early")
        return data

    def long(self) -> int:
        value = shift = 0
        for _ in range(10):
            byte = self.exact(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise _AvroDamage("a varint longer than 10 bytes")

    def skip(self, n: int) -> int:
        """Skip up to ``n`` bytes without holding them; how many there were."""
        skipped = 0
        while skipped < n:
            got = len(self.read(min(n - skipped, 1 << 20)))
            if not got:
                break
            skipped += got
        return skipped

    def find(self, marker: bytes) -> bool:
        """Skip to just past the next ``marker`` (True), or to the end of the file."""
        while True:
            chunk = self.read(1 << 20)  # fewer bytes only at the end of the file
            at = chunk.find(marker)
            if at >= 0:
                self.unread(chunk[at + len(marker):])
                return True
            if self.at_end():
                return False
            self.unread(chunk[len(chunk) - len(marker) + 1:])  # may start the marker

    def at_end(self) -> bool:
        if self._buf:
            return False
        data = self._handle.read(1 << 16)
        self._buf = data
        return not data

    def read_header(self) -> _AvroHeader:
        """Magic, metadata (schema, codec) and sync marker; raises _AvroDamage / ValueError."""
        import fastavro

        if self.read(4) != _AVRO_MAGIC:
            raise _AvroDamage("no Avro magic bytes at the start")
        meta: dict[str, bytes] = {}
        total = 0
        while True:
            count = self.long()
            if count == 0:
                break
            if count < 0:
                count = -count
                self.long()  # the block's size in bytes
            for _ in range(count):
                key_size = self.long()
                if not 0 <= key_size <= self._limit:
                    raise _AvroDamage(f"a metadata key of {key_size} bytes")
                key = self.exact(key_size).decode("utf-8")
                size = self.long()
                total += key_size + max(size, 0)
                if not 0 <= size <= self._limit or total > self._limit:
                    raise _AvroDamage(f"metadata larger than source.max_record_bytes "
                                      f"({self._limit})")
                meta[key] = self.exact(size)
        sync = self.exact(_SYNC)
        schema = json.loads(meta["avro.schema"])
        codec = meta.get("avro.codec", b"null").decode() or "null"
        own = codec if codec not in ("null", "deflate") else "null"
        prefix = bytearray(_AVRO_MAGIC)
        prefix += _zigzag(2)
        for key, value in ((b"avro.schema", meta["avro.schema"]), (b"avro.codec", own.encode())):
            prefix += _zigzag(len(key)) + key + _zigzag(len(value)) + value
        prefix += _zigzag(0) + sync
        fastavro.reader(io.BytesIO(bytes(prefix)))  # refuses a schema or codec it cannot read
        return _AvroHeader(schema, codec, sync, bytes(prefix))


def _long_at(data: bytes, i: int) -> tuple[int, int]:
    """The Avro long at ``data[i:]`` and the offset after it."""
    value = shift = 0
    for j in range(i, min(i + 10, len(data))):
        byte = data[j]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), j + 1
        shift += 7
    raise _AvroDamage("a varint cut short or longer than 10 bytes")


def _plausible(count: int | None, region: int) -> int | None:
    """A damaged block's record count from its header, when it can be believed: records of
    at least a byte each in the ``region`` bytes skipped."""
    return count if count is not None and 0 <= count <= region else None


def _avro_events(handle: Any, limit: int) -> Iterator[Any]:
    """An Avro container's events, block by block (see the module doc)."""
    import fastavro

    avro = _AvroFile(handle, limit)
    try:
        header = avro.read_header()
    except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
        avro.skip(1 << 62)
        yield Unread(0, avro.pos, None, None,
                     f"not a readable Avro file ({type(err).__name__}: {err}); the whole file "
                     f"({avro.pos} bytes) is unread")
        return
    sync = header.sync
    row = 0
    while not avro.at_end():
        start = avro.pos
        count: int | None = None
        try:
            count, size = avro.long(), avro.long()
            if count < 0 or size < 0:
                raise _AvroDamage(f"its header says {count} records in {size} bytes")
            if size > limit:
                # Too large to hold: skipped unread, if its sync marker is where it says.
                if avro.skip(size) == size and avro.read(_SYNC) == sync:
                    yield Unread(start, avro.pos - start, count, row + 1,
                                 f"an Avro block of {size} bytes ({count} records) is larger "
                                 f"than source.max_record_bytes ({limit}); skipped unread")
                    row += count
                    continue
                raise _AvroDamage(f"its header says {size} bytes, and no sync marker "
                                  "follows them")
            data = avro.exact(size)
            marker = avro.exact(_SYNC)
            if marker != sync:
                if _next_block_is_sound(avro, sync, limit):
                    # Only this block's sync marker is damaged: the block is lost, exactly.
                    yield Unread(start, avro.pos - start, count, row + 1,
                                 f"a damaged Avro block (the sync marker after it is wrong): "
                                 f"its {count} records are lost, reading goes on after it")
                    row += count
                    continue
                avro.unread(data + marker)
                raise _AvroDamage("the sync marker after it is wrong")
        except _AvroDamage as err:
            found = avro.find(sync)
            rows = _plausible(count, avro.pos - start)
            known = (f"at least the {rows} records its header counts are lost"
                     if rows is not None else "the records lost are not known")
            yield Unread(start, avro.pos - start, rows, row + 1,
                         f"a damaged Avro block ({err}): {known}; "
                         + ("reading goes on at the next sync marker" if found
                            else "no sync marker follows, so the rest of the file is unread"))
            row += rows or 0
            continue
        try:
            records = _avro_block(fastavro, header, count, data, limit)
        except Exception as err:  # noqa: BLE001 - corrupt data inside sound framing
            yield Unread(start, avro.pos - start, count, row + 1,
                         f"an Avro block that cannot be decoded: its {count} records are "
                         f"lost, reading goes on after it ({type(err).__name__}: {err})")
            row += count
            continue
        for record in records:
            row += 1
            if not isinstance(record, dict):  # a file whose schema is not a record
                yield Reject(row, "", f"not an Avro record: a {type(record).__name__}",
                             record, record)
                continue
            yield row, record


def _next_block_is_sound(avro: _AvroFile, sync: bytes, limit: int) -> bool:
    """Whether the end of the file or a block whose sync marker is right comes next;
    reads nothing away."""
    if avro.at_end():
        return True
    whole = avro.read(20)
    try:
        count, i = _long_at(whole, 0)
        size, i = _long_at(whole, i)
        if count < 0 or not 0 <= size <= limit:
            return False
        need = i + size + _SYNC
        if need > len(whole):
            whole += avro.read(need - len(whole))
        return len(whole) >= need and whole[need - _SYNC:need] == sync
    except _AvroDamage:
        return False
    finally:
        avro.unread(whole)


def _avro_block(fastavro: Any, header: _AvroHeader, count: int, data: bytes,
                limit: int) -> list:
    """One block's records, decoded by fastavro from a one-block container (null and
    deflate are decompressed here, at most ``limit`` bytes; other codecs by fastavro)."""
    if header.codec == "deflate":
        inflate = zlib.decompressobj(-15)
        data = inflate.decompress(data, limit + 1)
        if len(data) > limit or inflate.unconsumed_tail:
            raise _AvroDamage(f"it inflates to more than source.max_record_bytes ({limit})")
        if not inflate.eof:
            raise _AvroDamage("its deflate stream is cut short")
    block = b"".join((header.prefix, _zigzag(count), _zigzag(len(data)), data, header.sync))
    records = list(fastavro.reader(io.BytesIO(block)))
    if len(records) != count:
        raise _AvroDamage(f"it holds {len(records)} records, its header says {count}")
    return records


class _ReadAvroFile(_ReadFileFn):
    def _items(self, path: str, handle: Any) -> Iterator[Any]:
        yield from _avro_events(handle, _limit(self._options))


class ReadAvro(_ReadTransform):
    """Avro object container file paths -> RecordChunks of dicts."""

    _fn = _ReadAvroFile
    _label = "ParseAvro"
