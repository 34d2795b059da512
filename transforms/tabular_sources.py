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
file for Parquet and Avro. A Parquet or Avro file that cannot be opened at all becomes one
dead letter at row 0. Damage found part way becomes one dead letter at the first row that
could not be read, after the rows read before it: for Avro the rest of the file is lost; for
Parquet only the rest of that row group (the footer says where the next group starts). Each
such dead letter counts as one record read and rejected, so read = built + rejected still
holds, and the counts are always emitted. Any exception while decoding a file is treated as
damage (a dead letter, which the error threshold then reports), not as a crash.

Parquet reads only the top-level columns the features need (plus ``extra_fields``, e.g. the
split key's column), when the features are known; JSON Lines and Avro records keep every
field. JSON Lines text is streamed line by line: a line longer than ``max_line_bytes`` or
nested deeper than ``max_depth`` is a dead letter, never a memory blow-up or RecursionError.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from beam_tfrecords.sinks import storage
from beam_tfrecords.transforms.csv_columnar import Prefixed
from beam_tfrecords.transforms.feature_spec import FeatureSpec
from beam_tfrecords.transforms.sources import (
    BATCH_BYTES,
    BATCH_ROWS,
    CHUNK_ROWS,
    COUNTS,
    REJECTED,
    RecordChunk,
    read_outputs,
)
from beam_tfrecords.transforms.spread import Spread

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
_END = object()
_JSONL_BLOCK = 1 << 20  # bytes of whole lines per pyarrow.json block
_MAX_DEPTH_LIMIT = 512  # json's C parser raises RecursionError somewhat below 1000 levels


# -- options ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JsonlOptions:
    """How JSON Lines text is read.

    ``max_depth``: a line whose objects/arrays nest deeper than this (the line's object is
    level 1) is a dead letter. ``max_line_bytes``: a longer physical line is a dead letter
    and is skipped without being held in memory.
    """

    max_depth: int = 64
    max_line_bytes: int = 64 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ParquetOptions:
    """Parquet needs no options yet; the section exists so configs can name it."""


@dataclasses.dataclass(frozen=True)
class AvroOptions:
    """Avro needs no options yet; the section exists so configs can name it."""


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


def top_level_fields(fmt: str, path: str) -> list[str] | None:
    """The top-level field names a Parquet or Avro file declares (None for JSON Lines, whose
    records need not share fields), to validate a config before the pipeline runs."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        with storage.open_read(path) as handle:
            return list(pq.ParquetFile(handle).schema_arrow.names)
    if fmt == "avro":
        import fastavro

        with storage.open_read(path) as handle:
            schema = fastavro.reader(handle).writer_schema
        if isinstance(schema, Mapping) and schema.get("type") == "record":
            return [field["name"] for field in schema.get("fields", ())]
        return []
    return None


# -- the shared per-file DoFn -----------------------------------------------------------------

class _ReadFileFn(beam.DoFn):
    """One file -> RecordChunks, rejects and counts; subclasses parse with ``_items``.

    ``_items(path, handle)`` yields ``(row, record, None)`` for a good record,
    ``(row, None, (feature, reason, value, record))`` for one that cannot be read, and, on
    the columnar path (``columnar``), whole :class:`RecordChunk` s with ``batch`` set.
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

    def _items(self, path: str, handle: Any) -> Iterator[tuple[int, Any, Any]]:
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

    def _line_items(self, handle: Any, line_number: int) -> Iterator[tuple[int, Any, Any]]:
        """Every line of ``handle``, numbered after ``line_number``; long lines are skipped
        without being held."""
        limit = self._options.max_line_bytes
        while True:
            line = handle.readline(limit + 1)
            if not line:
                return
            line_number += 1
            if len(line) > limit:
                head = line[:200]
                while not line.endswith(b"\n"):  # skip the rest without holding it
                    line = handle.readline(1 << 20)
                    if not line:
                        break
                yield line_number, None, ("", f"line longer than max_line_bytes ({limit})",
                                          head, "")
                continue
            event = self._line_event(line_number, line)
            if event is not None:
                yield event

    def _line_event(self, line_number: int, line: bytes) -> tuple[int, Any, Any] | None:
        """One line (at most max_line_bytes) -> its event; None for a blank line."""
        max_depth = self._options.max_depth
        if line_number == 1 and line.startswith(_BOM):
            line = line[len(_BOM):]
        if not line.strip():  # blank: not a record, not counted
            return None
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            return line_number, None, ("", f"invalid UTF-8 at byte {err.start}: {err.reason}",
                                       line[max(0, err.start - 20):err.start + 20], line)
        # Cheap guard first: a line with few brackets cannot nest deeply.
        maybe_deep = text.count("{") + text.count("[") > max_depth
        try:
            record = json.loads(text)
        except RecursionError:
            return line_number, None, ("", f"nested deeper than max_depth ({max_depth})",
                                       text, text)
        except ValueError as err:
            return line_number, None, ("", f"not valid JSON: {err}", text, text)
        if not isinstance(record, dict):
            return line_number, None, ("", f"not a JSON object: a {type(record).__name__}; "
                                           "each line must hold one object", record, text)
        if maybe_deep and _too_deep(record, max_depth):
            return line_number, None, ("", f"nested deeper than max_depth ({max_depth})",
                                       text, text)
        return line_number, record, None

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

class _ReadParquetFile(_ReadFileFn):
    def _items(self, path: str, handle: Any) -> Iterator[tuple[int, Any, Any]]:
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(handle)
            columns = None
            if self._features:
                present = set(parquet.schema_arrow.names)
                columns = [c for c in needed_columns(self._features, self._extra)
                           if c in present]
            groups = [parquet.metadata.row_group(i).num_rows
                      for i in range(parquet.metadata.num_row_groups)]
        except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
            yield 0, None, ("", f"not a readable Parquet file: {type(err).__name__}: {err}",
                            "", "")
            return
        # Row group by row group: a damaged group costs its own rows only (the footer still
        # says where the next one starts).
        pending = _Batches(path, self._batch_rows) if self._columnar else None
        start = 0  # rows before this group
        for group, size in enumerate(groups):
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
                    rows = None if batch is None or pending is not None else batch.to_pylist()
                except Exception as err:  # noqa: BLE001 - corrupt or truncated data
                    failure = err
                    break
                if batch is None:
                    break
                if pending is not None:
                    yield from pending.add(row + 1, batch)
                    row += batch.num_rows
                    continue
                for record in rows:
                    row += 1
                    yield row, record, None
            if failure is not None:
                if pending is not None:
                    yield from pending.flush()
                yield row + 1, None, (
                    "", f"unreadable Parquet data from row {row + 1} (row group {group}, rows "
                        f"{start + 1}-{start + size}; the rest of the group is skipped): "
                        f"{type(failure).__name__}: {failure}", "", "")
            start += size
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

class _ReadAvroFile(_ReadFileFn):
    def _items(self, path: str, handle: Any) -> Iterator[tuple[int, Any, Any]]:
        import fastavro

        row = 0
        try:
            records = iter(fastavro.reader(handle))
        except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
            yield 0, None, ("", f"not a readable Avro file: {type(err).__name__}: {err}",
                            "", "")
            return
        while True:
            try:
                record = next(records, _END)
            except Exception as err:  # noqa: BLE001 - corrupt or truncated data
                yield row + 1, None, ("", f"unreadable Avro data from record {row + 1} on: "
                                          f"{type(err).__name__}: {err}", "", "")
                return
            if record is _END:
                return
            row += 1
            if not isinstance(record, dict):  # a file whose schema is not a record
                yield row, None, ("", f"not an Avro record: a {type(record).__name__}",
                                  record, record)
                continue
            yield row, record, None


class ReadAvro(_ReadTransform):
    """Avro object container file paths -> RecordChunks of dicts."""

    _fn = _ReadAvroFile
    _label = "ParseAvro"
