"""``BuildExamples``: record chunks -> per-split batches of serialized Examples.

Input elements are :class:`framework.RecordChunk` s; the main output is
``(split, SerializedBatch)``, one batch per split per chunk, so the sink receives a few large
elements instead of one per record. A record the coercion policy refuses becomes a dead-letter
row (``rejected`` output) naming its file, row, feature and reason, and is counted; nothing is
dropped silently. The ``counts`` output carries (``built`` | ``rejected_at_build``, n) pairs,
so the commit step can check read = written + rejected without trusting runner metrics.

A chunk that carries a ``pyarrow.RecordBatch`` is encoded column-wise by
:class:`columnar_encoder.ColumnarEncoder`; a chunk of Python mappings row by row. Both paths
produce the same bytes, splits, dead letters and counts, so outputs never depend on which one
ran. A record too large to write -- over protobuf's 2 GiB message limit, or, framed, over the
output's maximum shard size -- is a dead letter too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.metrics import Metrics

from beam_tfrecords.runtime import (
    batch_coders,  # noqa: F401  (SerializedBatch's coder)
    crash_note,
)
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.duplicates import DUPLICATE_KEYS, FingerprintShare
from beam_tfrecords.sinks.format import duplicates as dup
from beam_tfrecords.sinks.format.tfrecord_format import FRAME_OVERHEAD
from beam_tfrecords.transforms.codec.coercion import FeatureValueError
from beam_tfrecords.transforms.codec.columnar_encoder import ColumnarEncoder
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder, lookup
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.reader_files import IMAGE_SOURCE
from beam_tfrecords.transforms.codec.split_keys import key_bytes_column, key_column, repeats
from beam_tfrecords.transforms.codec.splits import NULL_KEY, SplitSpec, key_bytes
from beam_tfrecords.transforms.compute_statistics import STATISTICS
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, RecordChunk, dead_letter
from beam_tfrecords.transforms.split_hasher import KeyHashProcess
from beam_tfrecords.transforms.stats.batch_parts import part_for_rows, part_from_records

__all__ = ["PROTOBUF_MAX_BYTES", "BuildExamples", "record_size_error"]

# Protobuf refuses to parse a message of 2 GiB or more; TensorFlow could not read the record.
PROTOBUF_MAX_BYTES = 2**31 - 1


def record_size_error(size: int, max_record_bytes: int | None) -> str:
    """Why a serialized Example of ``size`` bytes cannot be written, or "" when it can.

    Args:
        size: the serialized Example's size in bytes.
        max_record_bytes: the largest framed record a shard may hold; None for protobuf's limit
            only.

    Returns:
        The reason, or ``""``.
    """
    if size > PROTOBUF_MAX_BYTES:
        return (f"the serialized Example is {size} bytes, over protobuf's message limit of "
                f"{PROTOBUF_MAX_BYTES} bytes (2 GiB - 1); TensorFlow could not parse it")
    if max_record_bytes is not None and size + FRAME_OVERHEAD > max_record_bytes:
        return (f"the serialized Example is {size} bytes ({size + FRAME_OVERHEAD} framed), over "
                f"the maximum shard size of {max_record_bytes} bytes")
    return ""


def _record_preview(batch: Any, index: int) -> dict:
    return batch.slice(index, 1).to_pylist()[0]


class _BuildExamplesFn(beam.DoFn):
    def __init__(self, features: Sequence[FeatureSpec], splits: SplitSpec,
                 max_record_bytes: int | None = None,
                 statistics: Mapping[str, str] | None = None,
                 duplicate_key: Sequence[str] = ()) -> None:
        self._features = tuple(features)
        self._splits = splits
        # A field whose value makes two records duplicates (``DUPLICATE_KEYS`` output: the
        # key values' fingerprints per split); empty: none.
        self._duplicate_key = tuple(duplicate_key)
        self._max_record_bytes = max_record_bytes
        # stored key -> statistics kind; None: no statistics output
        self._stats_kinds = dict(statistics) if statistics is not None else None
        # image features (an image reader's bytes): their header facts join the statistics
        self._images = tuple(f for f in self._features if f.source == IMAGE_SOURCE
                             and f.dtype == "bytes" and not f.shape and not f.sequence)
        self._built = Metrics.counter("build_examples", "examples_built")
        self._rejected = Metrics.counter("build_examples", "records_rejected")
        # Split keys hashed by the hashing process beside the build (split_hasher.py).
        self._hashed_beside = Metrics.counter("build_examples", "split_keys_hashed_beside")

    def setup(self) -> None:
        crash_note.enable_here()
        self._encoder = ExampleEncoder(self._features)
        self._columnar = ColumnarEncoder(self._features)  # caches its plan per schema
        self._key_hasher = KeyHashProcess()

    def teardown(self) -> None:
        hasher = getattr(self, "_key_hasher", None)
        if hasher is not None:
            hasher.close()

    def process(self, chunk: RecordChunk) -> Iterator[Any]:
        # A native crash while this chunk is encoded still names its file (crash_note).
        yield from crash_note.noted("encoding records of", chunk.path, self._outputs(chunk))

    def _outputs(self, chunk: RecordChunk) -> Iterator[Any]:
        # The chunk's counts leave before its dead letters (the slow part: a preview of each
        # record), so a writer judging rejected / read while rows arrive (sinks/early_stop.py)
        # never sees more of them rejected than there were.
        if chunk.batch is not None:
            built, outputs = self._process_batch(chunk)
        else:
            outputs = list(self._process_rows(chunk))  # held to the chunk's end anyway
            built = sum(len(e[1]) for e in outputs if isinstance(e, tuple))
        self._built.inc(built)
        self._rejected.inc(len(chunk) - built)
        yield beam.pvalue.TaggedOutput(COUNTS, ("built", built))
        yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_build", len(chunk) - built))
        yield from outputs

    def _reject(self, chunk: RecordChunk, offset: int, feature: str, reason: str, value: Any,
                record: Any) -> Any:
        return beam.pvalue.TaggedOutput(REJECTED, dead_letter(
            chunk.path, chunk.row_number(offset), feature, reason, value, record,
            chunk.range_offset))

    def _process_rows(self, chunk: RecordChunk) -> Iterator[Any]:
        # Records stay pieces until one join per split and chunk: an image is copied once.
        by_split: dict[str, tuple[list[list[bytes]], list[int], list[Any]]] = {}
        dup_keys: dict[str, list[bytes]] = {}
        splits = self._splits
        key = splits.key
        for offset, record in enumerate(chunk.records()):
            try:
                pieces, size = self._encoder.encode_pieces(record)
                too_big = record_size_error(size, self._max_record_bytes)
                if too_big:
                    yield self._reject(chunk, offset, "", too_big, size, record)
                    continue
                if splits.field:
                    split = self._named_split(record)
                elif key:
                    value = key_bytes(lookup(record, key))
                    split = (splits.choose(value) if value != NULL_KEY or len(splits.shares) == 1
                             else self._null_split())
                else:
                    split = splits.choose(pieces)
            except (FeatureValueError, TypeError) as err:
                feature = getattr(err, "feature", ".".join(key))
                value = getattr(err, "value", None)
                yield self._reject(chunk, offset, feature, str(err), value, record)
                continue
            if self._duplicate_key:
                value = key_bytes_or_none(record, self._duplicate_key)
                if value is not None:
                    dup_keys.setdefault(split, []).append(value)
            records, sizes, sources = by_split.setdefault(split, ([], [], []))
            records.append(pieces)
            sizes.append(size)
            if self._images and isinstance(record, dict) and record.get(
                    IMAGE_SOURCE[0]) is not None:
                sources.append(record)
        for split, (records, sizes, sources) in by_split.items():
            out = SerializedBatch.from_pieces(records, sizes)
            if self._stats_kinds is not None:  # (split, BatchPart)
                images = {f.values_key: sources for f in self._images} if sources else None
                yield beam.pvalue.TaggedOutput(STATISTICS, (split, part_from_records(
                    out, self._stats_kinds, images)))
            if split in dup_keys:
                yield from _key_shares(split, dup_keys[split])
            yield split, out  # (split, SerializedBatch)

    def _process_batch(self, chunk: RecordChunk) -> tuple[int, Iterator[Any]]:
        """(records built, the outputs: dead letters, then ``(split, SerializedBatch)``)."""
        batch = chunk.batch
        keys = self._hash_keys_beside(batch)
        columns = {} if self._stats_kinds is not None else None
        out, good, rejects = self._columnar.encode(batch, columns)
        # (row, feature, reason, value) of every rejected row, in row order at the end.
        dead: list[tuple[int, str, str, Any]] = [
            (int(row), getattr(err, "feature", ".".join(self._splits.key)), str(err),
             getattr(err, "value", None))
            for row, err in rejects
        ]
        sizes = np.diff(out.offsets)
        keep = np.ones(good.size, dtype=bool)
        limit = PROTOBUF_MAX_BYTES if self._max_record_bytes is None else min(
            PROTOBUF_MAX_BYTES, self._max_record_bytes - FRAME_OVERHEAD)
        for i in np.flatnonzero(sizes > limit).tolist():
            size = int(sizes[i])
            dead.append((int(good[i]), "", record_size_error(size, self._max_record_bytes),
                         size))
            keep[i] = False
        names, split_of = self._split_rows(batch, out, good, keep, dead, keys)
        dead.sort(key=lambda item: item[0])
        return int((split_of >= 0).sum()), self._batch_outputs(chunk, out, dead, names,
                                                               split_of, good, columns)

    def _batch_outputs(self, chunk: RecordChunk, out: SerializedBatch, dead: list,
                       names: list[str], split_of: np.ndarray, good: np.ndarray,
                       columns: dict | None) -> Iterator[Any]:
        for row, feature, reason, value in dead:
            yield self._reject(chunk, row, feature, reason, value,
                               _record_preview(chunk.batch, row))
        # split_of: index into names per encoded record (-1: rejected); splits in the order
        # their first record appears, as the row path yields them.
        for code in dict.fromkeys(split_of[split_of >= 0].tolist()):
            taken = _take(out, split_of == code)
            if columns is not None:  # (split, BatchPart): the values the batch wrote
                yield beam.pvalue.TaggedOutput(STATISTICS, (names[code], part_for_rows(
                    columns, good[split_of == code], chunk.batch.num_rows, taken,
                    self._stats_kinds)))
            if self._duplicate_key:
                yield from _key_shares(names[code], _batch_key_bytes(
                    chunk.batch, self._duplicate_key, good[split_of == code]))
            yield names[code], taken  # (split, SerializedBatch)

    def _hash_keys_beside(self, batch: Any) -> tuple[pa.Array, bool] | None:
        """For a split keyed on a column of unique-looking keys: the key column, and whether
        its present keys went to the hashing process to be hashed while the batch is encoded
        (:mod:`split_hasher`); None when the split is not keyed on such a column."""
        splits = self._splits
        if splits.field or not splits.key or len(splits.shares) == 1:
            return None
        column = key_column(batch, splits.key)
        if column is None:
            return None
        present = column.drop_null() if column.null_count else column
        beside = not repeats(present)
        if beside:
            self._key_hasher.submit(present)
        return column, beside

    def _split_rows(self, batch: Any, out: SerializedBatch, good: np.ndarray, keep: np.ndarray,
                    dead: list, keys: tuple[pa.Array, bool] | None = None
                    ) -> tuple[list[str], np.ndarray]:
        """(split names, per encoded record the index of its split or -1 when rejected)."""
        splits = self._splits
        names = list(splits.names)
        split_of = np.full(good.size, -1, dtype=np.int64)
        todo = np.flatnonzero(keep)
        if not splits.field and len(splits.shares) == 1:
            split_of[todo] = 0
            return names, split_of
        if not splits.field and not splits.key:  # hash of the serialized Example
            payload, offs = memoryview(out.payload), out.offsets.tolist()
            keys = [payload[offs[i]:offs[i + 1]] for i in todo.tolist()]
            split_of[todo] = splits.choose_many(keys)
            return names, split_of
        path = splits.field or splits.key
        if keys is not None:
            self._assign_column(*keys, todo, split_of, good, dead)
            return names, split_of
        values = _lookup_rows(batch, path, good[todo])
        keys, rows = [], []
        for i, value in zip(todo.tolist(), values):
            try:
                if isinstance(value, FeatureValueError):
                    raise value
                if splits.field:
                    split_of[i] = names.index(self._named_split_value(value))
                    continue
                keys.append(key_bytes(value))
                rows.append(i)
            except (FeatureValueError, TypeError) as err:
                dead.append((int(good[i]), getattr(err, "feature", ".".join(path)), str(err),
                             getattr(err, "value", None)))
        if keys:
            self._assign(keys, np.asarray(rows, dtype=np.int64), split_of, good, dead)
        return names, split_of

    def _assign(self, keys: list, rows: np.ndarray, split_of: np.ndarray, good: np.ndarray,
                dead: list) -> None:
        """Hash ``keys`` (one per row of ``rows``) into ``split_of``; a missing key goes to
        ``splits.null_key``'s split or becomes a dead letter."""
        splits = self._splits
        missing = np.fromiter((k == NULL_KEY for k in keys), dtype=bool, count=len(keys))
        if not missing.any():
            split_of[rows] = splits.choose_many(keys)
            return
        present = [k for k, m in zip(keys, missing.tolist()) if not m]
        if present:
            split_of[rows[~missing]] = splits.choose_many(present)
        self._assign_missing(rows[missing], split_of, good, dead)

    def _assign_column(self, column: pa.Array, beside: bool, todo: np.ndarray,
                       split_of: np.ndarray, good: np.ndarray, dead: list) -> None:
        """:meth:`_assign` for a :func:`split_keys.key_column` (null: missing) of the whole
        batch, for the encoded records ``todo`` (rows ``good[todo]``). Its present keys were
        sent to the hashing process (``beside``), or repeat: then each distinct key is hashed
        once. Either way the splits are those of one ``key_bytes`` hash per row."""
        missing_all = column.is_null().to_numpy(zero_copy_only=False)
        present = column.drop_null() if missing_all.any() else column
        chosen = np.full(len(column), -1, dtype=np.int64)
        if beside:
            before = self._key_hasher.hashed_beside
            chosen[~missing_all] = self._splits.choose_digests(self._key_hasher.collect())
            self._hashed_beside.inc(self._key_hasher.hashed_beside - before)
        elif len(present):
            encoded = key_bytes_column(present).dictionary_encode()
            codes = self._splits.choose_many(encoded.dictionary.to_pylist())
            chosen[~missing_all] = codes[encoded.indices.to_numpy(zero_copy_only=False)]
        rows = good[todo]
        missing = missing_all[rows]
        split_of[todo[~missing]] = chosen[rows[~missing]]
        if missing.any():
            self._assign_missing(todo[missing], split_of, good, dead)

    def _assign_missing(self, rows: np.ndarray, split_of: np.ndarray, good: np.ndarray,
                        dead: list) -> None:
        """Rows whose split key is missing: ``splits.null_key``'s split, or dead letters."""
        splits = self._splits
        target = splits.null_split()
        if target is not None:
            split_of[rows] = list(splits.names).index(target)
            return
        reason = str(self._null_key_error())
        for i in rows.tolist():
            dead.append((int(good[i]), ".".join(splits.key), reason, None))

    def _null_key_error(self) -> FeatureValueError:
        return FeatureValueError(".".join(self._splits.key), None, "a split key",
                                 self._splits.null_reason)

    def _null_split(self) -> str:
        """The split of a record whose key is missing, or a FeatureValueError (rejected)."""
        target = self._splits.null_split()
        if target is None:
            raise self._null_key_error()
        return target

    def _named_split(self, record: Any) -> str:
        """The split a record names in the split field (image folders); rejects others."""
        return self._named_split_value(lookup(record, self._splits.field))

    def _named_split_value(self, value: Any) -> str:
        field = self._splits.field
        try:
            return self._splits.named(value)
        except ValueError as err:
            raise FeatureValueError(".".join(field), value, "a split name", str(err)) from None


def key_bytes_or_none(record: Any, path: tuple[str, ...]) -> bytes | None:
    """``key_bytes`` of a record's value at ``path``; None where it has none (a missing or
    null key, or one no key can be made of): such a record is left out of the count.

    Args:
        record: the record.
        path: the key's field path.

    Returns:
        The key bytes, or None.
    """
    try:
        value = key_bytes(lookup(record, path))
    except (FeatureValueError, TypeError, KeyError):
        return None
    return None if value == NULL_KEY else value


def _batch_key_bytes(batch: Any, path: tuple[str, ...], rows: np.ndarray) -> list[bytes]:
    """The key bytes of ``rows`` of a batch (rows without a key left out): one Arrow pass for
    a top-level integer or text column, ``key_bytes`` row by row otherwise."""
    column = key_column(batch, path)
    if column is not None:
        keys = key_bytes_column(column.take(pa.array(rows, pa.int64())))
        return [k for k in keys.to_pylist() if k is not None]
    found = []
    for value in _lookup_rows(batch, path, rows):
        if isinstance(value, FeatureValueError):
            continue
        try:
            key = key_bytes(value)
        except TypeError:
            continue
        if key != NULL_KEY:
            found.append(key)
    return found


def _key_shares(split: str, keys: list[bytes]) -> Iterator[Any]:
    """The ``DUPLICATE_KEYS`` output of one split's keys: a share per bucket."""
    for bucket, part in sorted(dup.key_counts(split, keys).by_bucket().items()):
        yield beam.pvalue.TaggedOutput(DUPLICATE_KEYS, FingerprintShare(bucket, part))


def _take(batch: SerializedBatch, rows: np.ndarray) -> SerializedBatch:
    """The records of ``batch`` where ``rows`` is true, in order: one Arrow ``take`` (a memcpy
    per record in C++), five times faster than a numpy byte mask over the payload."""
    if rows.all():
        return batch
    wanted = np.flatnonzero(rows)
    records = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(batch),
        [None, pa.py_buffer(batch.offsets), pa.py_buffer(batch.payload)])
    taken = records.take(pa.array(wanted))
    offsets = np.frombuffer(taken.buffers()[1], np.int64, wanted.size + 1, taken.offset * 8)
    return SerializedBatch(memoryview(taken.buffers()[2])[offsets[0]:offsets[-1]],
                           offsets - offsets[0])


def _lookup_rows(batch: Any, path: tuple[str, ...], rows: np.ndarray) -> list:
    """``lookup(record, path)`` for the given rows (a FeatureValueError where it raises)."""
    names = batch.schema.names
    wanted = [name for name in dict.fromkeys((path[0], ".".join(path), "/".join(path)))
              if name in names]
    if len(path) == 1 and wanted:
        column = batch.column(path[0]).take(rows).to_pylist()
        return column
    records = batch.select(wanted).take(rows).to_pylist() if wanted else [{}] * rows.size
    values: list = []
    for record in records:
        try:
            values.append(lookup(record, path))
        except FeatureValueError as err:
            values.append(err)
    return values


class BuildExamples(beam.PTransform):
    """RecordChunks -> ``(split, SerializedBatch)``; also ``rejected`` rows and ``counts``.

    ``max_record_bytes``: the largest framed record (serialized Example plus 16 bytes of
    TFRecord framing) a shard may hold -- the pipeline passes ``output.shard_size.max``; None
    checks only protobuf's 2 GiB limit. Larger records are dead letters, never written.

    Args:
        features: the features to encode.
        splits: how records are assigned to splits.
        max_record_bytes: the largest framed record, in bytes.
    """

    def __init__(self, features: Sequence[FeatureSpec], splits: SplitSpec = SplitSpec(),
                 max_record_bytes: int | None = None) -> None:
        super().__init__()
        self._features = tuple(features)
        self._splits = splits
        self._max_record_bytes = max_record_bytes

    def expand(self, chunks):
        return chunks | "EncodeChunks" >> beam.ParDo(
            _BuildExamplesFn(self._features, self._splits, self._max_record_bytes)
        ).with_output_types(tuple[str, SerializedBatch]).with_outputs(
            REJECTED, COUNTS, main="examples")
