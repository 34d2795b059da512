"""JSON Lines: its options, the reader of one file, and the public ``ReadJsonl``.

Line by line with ``json``; or (``columnar``, the default) blocks of whole lines read by
``pyarrow.json`` into RecordBatch chunks wherever the result is provably the one ``json`` gives
(flat objects of int64, float64, string and bool values), the other lines one by one. Records
are dicts (nested objects too, arrays as lists, null as None) and keep every field. Row numbers
are physical lines: a blank line is not a record and not counted, but advances the number.

Text is streamed line by line: a line longer than ``max_record_bytes`` (``max_line_bytes``, its
older name) or nested deeper than ``max_depth`` is a dead letter, never a memory blow-up or
RecursionError; reading goes on at the next line. A number no double holds (``1e400``,
``1e-400``) is read as its exact ``Decimal`` (:func:`text_values.json_number`), so the range
rules judge it as they judge the same CSV cell: never stored as ``inf``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from beam_tfrecords.transforms.codec.text_values import json_integer, json_number
from beam_tfrecords.transforms.readers.csv_columnar import BOM, Prefixed, text_stream
from beam_tfrecords.transforms.readers.events import (
    DEFAULT_MAX_RECORD_BYTES,
    PREVIEW_BYTES,
    Reject,
    bounded_line,
)
from beam_tfrecords.transforms.readers.framework import (
    ClaimedWindow,
    RangeFound,
    ReadFileFn,
    ReadFiles,
    ReadSource,
    handle_reader,
    parse_arguments,
    records_chunk,
    text_plan,
)
from beam_tfrecords.transforms.readers.jsonl_ranges import line_start
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES
from beam_tfrecords.transforms.readers.source_options import JsonlOptions, parse_jsonl_options

__all__ = ["JsonlOptions", "ReadJsonl", "ReadJsonlFiles", "parse_jsonl_options"]

_JSONL_BLOCK = 1 << 20  # bytes of whole lines per pyarrow.json block


# -- options ----------------------------------------------------------------------------------

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


class _ReadJsonlFile(ReadFileFn):
    """JSON Lines, line by line with ``json``; or (``columnar``) blocks of whole lines parsed
    by ``pyarrow.json`` where the result is provably the same (see ``_block_items``)."""

    def events(self, path: str, handle: Any) -> Iterator[Any]:
        handle, foreign = text_stream(handle)
        if foreign is not None:
            yield foreign
            return
        if self._columnar:
            yield from self._columnar_items(path, handle)
        else:
            yield from self._line_items(handle, 0)

    def plan(self, path: str, size: int, split_bytes: int) -> tuple[int, list[int]] | None:
        return text_plan("jsonl", path, size, split_bytes)

    def range_events(self, path: str, handle: Any, start: int, tracker: Any,
                     found: RangeFound) -> Iterator[Any]:
        """The lines starting in the range (jsonl_ranges), numbered from its first; no join
        is needed (a line starts after every LF)."""
        read_at = handle_reader(handle)
        first = line_start(read_at, start)
        found.range_offset = first
        window = io.BufferedReader(
            ClaimedWindow(handle, first, tracker, lambda end: line_start(read_at, end)),
            _JSONL_BLOCK)
        bom = first == 0  # only the file's first line may start with a BOM
        if self._columnar:
            yield from self._columnar_items(path, window, bom)
        else:
            yield from self._line_items(window, 0, bom)

    def _line_items(self, handle: Any, line_number: int, bom: bool = True) -> Iterator[Any]:
        """Every line of ``handle``, numbered after ``line_number``; long lines are skipped
        without being held. ``bom``: line 1 is the file's first (a BOM before it is
        dropped)."""
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
            event = self._line_event(line_number, line, bom)
            if event is not None:
                yield event

    def _line_event(self, line_number: int, line: bytes, bom: bool = True) -> Any:
        """One line (at most max_line_bytes) -> its event; None for a blank line."""
        max_depth = self._options.max_depth
        if bom and line_number == 1 and line.startswith(BOM):
            line = line[len(BOM):]
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
            record = json.loads(text, parse_float=json_number, parse_int=json_integer)
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

    def _columnar_items(self, path: str, handle: Any, bom: bool = True) -> Iterator[Any]:
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
                        yield from self._line_items(rest, line, bom)
                        return
                    pending = buf
                    continue
                block, pending = buf[:cut], buf[cut:]
            else:
                block, pending = buf, b""
            if block:
                if line == 0 and block.startswith(BOM):  # line 1 keeps its own rules
                    end = block.find(b"\n") + 1 or len(block)
                    yield from self._line_items(io.BytesIO(block[:end]), 0, bom)
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
        Records keep their file order (see ``_runs``).
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
        if not slow.any():
            yield records_chunk(path, [], numbers.tolist(),
                                table.combine_chunks().to_batches()[0])
            return
        # Records leave in file order: runs of rows Arrow read exactly become chunks, the
        # rows between them go through ``json`` in their place. A short run is not worth a
        # chunk of its own (each costs Beam a step per element), so it goes through json too.
        for start, stop, fast in _runs(slow, MIN_CHUNK_RUN):
            if fast:
                chunk = table.slice(start, stop - start).combine_chunks().to_batches()[0]
                yield records_chunk(path, [], numbers[start:stop].tolist(), chunk)
                continue
            for index in range(start, stop):
                event = self._line_event(int(numbers[index]),
                                         block[starts[records[index]]:ends[records[index]]])
                if event is not None:
                    yield event


MIN_CHUNK_RUN = 64  # rows: a shorter run of Arrow-read rows goes through json in its place


def _runs(slow: np.ndarray, min_fast: int) -> Iterator[tuple[int, int, bool]]:
    """``(start, stop, fast)`` runs covering ``slow`` in order: ``fast`` runs are maximal
    stretches of False at least ``min_fast`` long; everything else is a slow run."""
    change = np.flatnonzero(np.diff(slow.astype(np.int8))) + 1
    bounds = np.concatenate(([0], change, [len(slow)])).tolist()
    pending = None  # start of a slow run not yet yielded
    for start, stop in zip(bounds[:-1], bounds[1:]):
        fast = not slow[start] and stop - start >= min_fast
        if fast:
            if pending is not None:
                yield pending, start, False
                pending = None
            yield start, stop, True
        elif pending is None:
            pending = start
    if pending is not None:
        yield pending, len(slow), False


def _arrow_json(block: bytes) -> Any:
    """``block`` read by pyarrow.json as a table of flat scalar columns, or None."""
    import pyarrow as pa
    import pyarrow.json as pajson

    if block.startswith(BOM):  # Arrow drops it; json refuses it after line 1
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


class ReadJsonlFiles(ReadFiles):
    """JSON Lines file paths -> RecordChunks of dicts (main ``records``), dead-letter rows
    (``rejected``) and ``counts`` pairs, with :class:`JsonlOptions`."""

    _fn = _ReadJsonlFile
    _label = "ParseJsonl"


class ReadJsonl(ReadSource):
    """Reads JSON Lines files (one object per line): ``p | btf.ReadJsonl("gs://b/*.jsonl")``.

    Args:
      file_pattern: the JSON Lines files: a glob on any Beam filesystem, or a list of paths.
      features: the config's ``features:`` mapping or FeatureSpecs, optional: records keep
        every field, nested objects as dicts (``source: user.name`` reaches into them). When
        given, ``btf.WriteTFRecordDataset`` and ``btf.ToExamples`` use them if given none.
      max_depth: a line nesting objects/arrays deeper than this (1 to 512) is a dead letter.
      max_record_bytes: the longest line held in memory (bytes, or a size such as "64MiB");
        a longer one is a dead letter, skipped without being held.
      split_bytes: a file larger than this (bytes, or a size such as "64MiB") is read as
        ranges of about this size that workers share (default 64 MiB).

    Returns a dict of PCollections, also readable as attributes: ``records``, ``rejected``
    (dead-letter dicts) and ``counts``. A bad argument raises an error naming it.
    """

    _files = ReadJsonlFiles

    def __init__(self, file_pattern: str | Sequence[str], features: Any = None, *,
                 max_depth: int = JsonlOptions.max_depth,
                 max_record_bytes: int | str = DEFAULT_MAX_RECORD_BYTES,
                 split_bytes: int | str = DEFAULT_SPLIT_BYTES) -> None:
        super().__init__(file_pattern, features, parse_arguments(
            "ReadJsonl", parse_jsonl_options, {"max_depth": max_depth}, max_record_bytes,
            limit_field="max_line_bytes"), split_bytes=split_bytes)


