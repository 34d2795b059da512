"""Parquet: its options, the reader of one file, and the public ``ReadParquet``.

The needed top-level columns (:func:`needed_columns`: the features' plus ``extra_fields``, e.g.
the split key's) are read as stored, row group by row group, into RecordBatch chunks of up to
``batch_rows`` rows (consecutive small groups are gathered); with ``columnar=False`` as chunks
of dicts. Values keep their natural form: structs are dicts, lists lists, nulls None,
timestamps and dates ``datetime`` / ``date``, binary ``bytes``. Row numbers are 1-based across
the file.

Damage is *unread input*, never a silent loss and never a crash: a file whose footer cannot be
read is unread as a whole (its size in bytes, rows unknown); a row group that fails part way
loses the rest of that group only (its rows known from the footer, its byte span the group's),
and the next group is read. Pages written with checksums are verified. A footer larger than
``max_record_bytes`` is not read at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers.declared_fields import check_parquet_footer, parquet_fields
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES, Unread
from beam_tfrecords.transforms.readers.framework import (
    BATCH_BYTES,
    CHUNK_ROWS,
    RangeFound,
    ReadFileFn,
    ReadFiles,
    ReadSource,
    RecordChunk,
    max_record_bytes_of,
    parse_arguments,
)
from beam_tfrecords.transforms.readers.parquet_ranges import group_span, plan_row_groups
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES
from beam_tfrecords.transforms.readers.source_options import ParquetOptions, parse_parquet_options

__all__ = ["ParquetOptions", "ReadParquet", "ReadParquetFiles", "needed_columns",
           "parquet_fields", "parse_parquet_options"]

_LOG = logging.getLogger(__name__)


# -- options ----------------------------------------------------------------------------------

def needed_columns(features: Sequence[FeatureSpec], extra: Sequence[str] = ()) -> list[str]:
    """Top-level fields the features read (plus ``extra``, e.g. the split key's first part).

    A dotted source also names its literal column (``meta.label``), which ``lookup`` accepts.

    Args:
        features: the features.
        extra: other fields to read.

    Returns:
        Field names, without repeats.
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



class _ReadParquetFile(ReadFileFn):
    """Row group by row group (see the module doc); the needed columns only, when the
    features are known."""

    def plan(self, path: str, size: int, split_bytes: int) -> tuple[int, list[int]] | None:
        """Row groups gathered into ranges (parquet_ranges); a file of one group is read
        whole (logged with the writer's option that would make it split)."""
        import pyarrow.parquet as pq

        with storage.open_read(path) as handle:
            check_parquet_footer(handle, max_record_bytes_of(self._options))
            meta = pq.ParquetFile(handle).metadata
            ranges, why = plan_row_groups(meta, split_bytes, path)
        if why is not None:
            _LOG.warning("%s", why)
        if len(ranges) < 2:
            return None
        return meta.num_row_groups, [r.groups[0] for r in ranges] + [meta.num_row_groups]

    def range_events(self, path: str, handle: Any, start: int, tracker: Any,
                     found: RangeFound) -> Iterator[Any]:
        """The row groups the range claims, one by one; rows stay the file's (the footer
        says how many come before)."""
        yield from self._events(path, handle, start, tracker)

    def events(self, path: str, handle: Any) -> Iterator[Any]:
        return self._events(path, handle)

    def _events(self, path: str, handle: Any, first: int = 0, tracker: Any = None
                ) -> Iterator[Any]:
        """The events of the row groups from ``first`` (each claimed on ``tracker``, when
        given, before it is read)."""
        import pyarrow.parquet as pq

        size = 0
        try:
            size = check_parquet_footer(handle, max_record_bytes_of(self._options))
            parquet = pq.ParquetFile(handle, page_checksum_verification=True)
            columns = None
            if self._features:
                present = set(parquet.schema_arrow.names)
                columns = [c for c in needed_columns(self._features, self._extra)
                           if c in present]
            meta = parquet.metadata
            groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
            sizes = [group.num_rows for group in groups]
            spans = [group_span(group) for group in groups]
        except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
            if first:  # the range starting the file reports it
                if tracker is not None:
                    tracker.try_claim(tracker.current_restriction().stop)
                return
            yield Unread(0, size, None, None,
                         f"not a readable Parquet file ({type(err).__name__}: {err}); the "
                         f"whole file ({size} bytes) is unread")
            return
        # Row group by row group: a damaged group costs its own rows only (the footer still
        # says where the next one starts).
        pending = _Batches(path, self._batch_rows) if self._columnar else None
        start = sum(sizes[:first])  # rows before this group
        for group, rows in enumerate(sizes[first:], first):
            if tracker is not None and not tracker.try_claim(group):
                break
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
        if tracker is not None:  # done: past the last group, or the range's end
            tracker.try_claim(max(len(sizes), tracker.current_restriction().stop))
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


class ReadParquetFiles(ReadFiles):
    """Parquet file paths -> RecordChunks (main ``records``), dead-letter rows (``rejected``)
    and ``counts`` pairs, with :class:`ParquetOptions`; reads only the top-level columns the
    features (and ``extra_fields``, e.g. the split key) name, when the features are known."""

    _fn = _ReadParquetFile
    _label = "ParseParquet"


class ReadParquet(ReadSource):
    """Reads Parquet files as Arrow record batches: ``p | btf.ReadParquet("gs://b/*.parquet")``.

    Args:
      file_pattern: the Parquet files: a glob (local, ``gs://`` ...) or a list of paths.
      features: the config's ``features:`` mapping or FeatureSpecs, optional. When given, only
        the top-level columns they read are read (plus ``extra_fields``); without, every
        column. ``btf.WriteTFRecordDataset`` and ``btf.ToExamples`` use them if given none.
      extra_fields: further top-level columns to read, e.g. the split key's column when no
        feature reads it (``splits={"key": "id", ...}``).
      max_record_bytes: the largest footer held in memory (bytes, or a size such as "64MiB").
      split_bytes: a file larger than this (bytes, or a size such as "64MiB") is read as
        ranges of about this size that workers share (default 64 MiB).

    The result: ``records`` (RecordBatch chunks), ``rejected`` (unreadable files and row
    groups as dead-letter dicts) and ``counts``, as a :class:`ReadResult`. A bad argument is
    refused by name.
    """

    _files = ReadParquetFiles

    def __init__(self, file_pattern: str | Sequence[str], features: Any = None, *,
                 extra_fields: Sequence[str] = (),
                 max_record_bytes: int | str = DEFAULT_MAX_RECORD_BYTES,
                 split_bytes: int | str = DEFAULT_SPLIT_BYTES) -> None:
        super().__init__(file_pattern, features, parse_arguments(
            "ReadParquet", parse_parquet_options, {}, max_record_bytes), extra_fields,
            split_bytes)


