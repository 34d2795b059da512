"""``WriteTFRecordShards``: sharded TFRecord files with sizes in a band, committed atomically.

How it works (no global shuffle, no shard held in memory):

1. Write -- every bundle streams its records, per split, into files under a staging prefix
   with names unique per bundle attempt, rolling to a new file when the stored bytes reach
   the target. A bundle that fails and is retried leaves orphans no one references.
2. Plan -- the parts that succeeded (the bundles' outputs) are gathered (a list of small
   descriptors, not data) and :func:`shard_plan.plan_shards` groups the small tails.
3. Finalize -- each planned shard is produced under its final name
   ``<split>/<name>-SSSSS-of-NNNNN.tfrecord[.gz|.deflate]``: a rename for a single part, a byte
   concatenation for several (valid for uncompressed and GZIP TFRecords). Finalize is
   idempotent. Where there are several workers, plan, finalize and group are three steps:
   the plan entries are reshuffled so that the finalize work spreads over the workers, and a
   last step gathers the shards. On a single in-process worker (Beam's direct runner in its
   default mode, ``runtime/spread.py``) there is nobody to spread to, and every stage has
   a fixed cost (a bundle and its state sampler thread, bench/README.md), so there
   the three are one step that plans, finalizes the shards one after another and groups
   them. Both shapes call the same functions and write the same shards.

The output is one element: ``{split: [ShardInfo, ...]}``, which the manifest step consumes.
Nothing here writes the manifest: the caller does, last, as the commit point.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from apache_beam.metrics import Metrics

from beam_tfrecords.runtime import storage
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import INDEX_SUFFIX, index_path, resolve_in_version
from beam_tfrecords.sinks.format.shard_plan import Part, ShardSize, plan_shards, should_roll_before
from beam_tfrecords.sinks.lease import JobLease
from beam_tfrecords.sinks.shard_writers import (
    ShardInfo,
    ShardWriterFn,
    WriteShards,
    shard_file_name,
)

__all__ = ["WriteTFRecordShards"]

_LOG = logging.getLogger(__name__)
# Mean record size from which records are written piece by piece (header, data, footer)
# instead of being copied into one framed buffer first: images, audio, large tensors.
_PIECEWISE_RECORD_BYTES = 32 * 1024


class _PartWriter:
    """One open staged file of one split, with the bookkeeping to roll it.

    With ``index`` (uncompressed only) an ``offset length`` line per record is streamed to a
    sidecar ``<part>.index`` while writing -- the format PyTorch TFRecord loaders read.
    """

    def __init__(self, path: str, compression: str, index: bool = False) -> None:
        self.path = path
        self.out = storage.open_counted_write(path)
        self.index = storage.open_write(path + INDEX_SUFFIX) if index else None
        self.writer = tff.TFRecordWriter(self.out, compression, track_offsets=index,
                                         on_record=self._index_line if index else None)
        self.compression = compression

    def _index_line(self, offset: int, length: int) -> None:
        self.index.write(b"%d %d\n" % (offset, length))  # type: ignore[union-attr]

    def stored_estimate(self) -> int:
        return self.writer.estimated_bytes_on_disk()

    def exact_size(self) -> int:
        """Stored bytes so far, exactly (flushes the compressor when there is one)."""
        if self.compression != tff.NONE:
            self.writer.sync()
        return self.writer.bytes_on_disk

    def close(self) -> Part:
        self.writer.close()
        self.out.close()
        if self.index is not None:
            self.index.close()
        return Part(self.path, self.writer.records, self.out.bytes, self.out.crc32c)


class _WriteParts(ShardWriterFn):
    """Streams (split, records) into staged, size-rolled files; emits (split, Part).

    With ``progress_dir`` it also leaves its running totals there for a launcher's progress
    line (``sinks/progress_files.py``): a clock read per batch, a small file every few seconds.
    With ``lease`` its bundles keep the job's lease on the output alive while they write.
    """

    def __init__(self, staging: str, compression: str, size: ShardSize,
                 index: bool = False, progress_dir: str | None = None,
                 lease: JobLease | None = None, duplicates: bool = False) -> None:
        super().__init__(staging, progress_dir, lease, duplicates)
        self._closed_bytes = 0
        self._index = index
        self._compression = compression
        self._size = size
        self._parts = Metrics.counter("tfrecord_sink", "parts_written")
        self._oversized = Metrics.counter("tfrecord_sink", "records_over_max_shard_size")
        self._bytes = Metrics.counter("tfrecord_sink", "bytes_written")
        self._bundles = Metrics.counter("tfrecord_sink", "bundles_written")

    def _start_bundle(self) -> None:
        self._open: dict[str, _PartWriter] = {}

    def _new_writer(self, split: str) -> _PartWriter:
        path = self._staged_path(split, tff.file_suffix(self._compression))
        writer = _PartWriter(path, self._compression, self._index)
        self._open[split] = writer
        return writer

    def _roll(self, split: str) -> None:
        part = self._open.pop(split).close()
        self._parts.inc()
        self._bytes.inc(part.bytes)
        self._closed_bytes += part.bytes
        self._done.append((split, part))

    def _stored_bytes(self) -> int:
        return self._closed_bytes + sum(w.stored_estimate() for w in self._open.values())

    def _write(self, split: str, records: SerializedBatch) -> None:
        bounds = records.offsets + tff.FRAME_OVERHEAD * np.arange(len(records) + 1)
        crcs = None
        if self._counts_duplicates:  # computed once: framing takes them as they are
            if records.pieces is not None:
                crcs = tff.record_piece_crcs(records.pieces)
                self._note(split, records, crcs)
            else:
                slices = tff.record_slices(records.payload, records.offsets)
                crcs = tff.record_crcs(records.payload, records.offsets, slices)
                self._note(split, records, crcs, slices)
        if records.pieces is not None:  # large records still in the encoder's pieces
            sizes = np.diff(records.offsets).tolist()
            buffers, starts = tff.frame_record_pieces(records.pieces, sizes, crcs)
            self._write_framed(split, bounds, lambda w, i, j: w.write_pieces(
                buffers[starts[i]:starts[j]], j - i, sizes[i:j]))
        elif records.nbytes >= _PIECEWISE_RECORD_BYTES * len(records):
            pieces = tff.frame_pieces(records.payload, records.offsets, crcs)
            self._write_framed(split, bounds, lambda w, i, j: w.write_pieces(
                pieces[3 * i:3 * j], j - i))
        else:
            framed = memoryview(tff.frame_batch(records.payload, records.offsets, crcs))
            self._write_framed(split, bounds, lambda w, i, j: w.write_framed(
                framed[bounds[i]:bounds[j]], j - i,
                sizes=(np.diff(bounds[i:j + 1]) - tff.FRAME_OVERHEAD).tolist() if self._index
                else None))

    def _write_framed(self, split: str, bounds: np.ndarray,
                      write: Callable[[tff.TFRecordWriter, int, int], None]) -> None:
        """Records ``i:j`` go out as ``write(writer, i, j)``; ``bounds`` are their framed offsets.
        """
        size = self._size
        n = bounds.size - 1
        i = 0
        while i < n:
            writer = self._open.get(split) or self._new_writer(split)
            first = int(bounds[i + 1] - bounds[i])
            current = writer.stored_estimate()
            if should_roll_before(current, first, size) and should_roll_before(
                writer.exact_size(), first, size
            ):
                self._roll(split)
                continue
            # Take as many records as fit below the target at the observed compression ratio.
            ratio = max(current, 1) / max(writer.writer.uncompressed_bytes, 1) if current else 1.0
            room = max(size.target - current, 0) / max(ratio, 1e-6)
            j = int(np.searchsorted(bounds, bounds[i] + room, side="right")) - 1
            j = min(max(j, i + 1), n)
            write(writer.writer, i, j)
            if j - i == 1 and first > size.max:
                self._oversized.inc()
                _LOG.warning("a record of %d bytes exceeds the maximum shard size %d; it gets "
                             "a shard of its own", first, size.max)
            i = j
            if writer.stored_estimate() >= size.target and writer.exact_size() >= size.target:
                self._roll(split)

    def _flush(self) -> None:
        if self._open:
            self._bundles.inc()
        for split in list(self._open):
            self._roll(split)


def _plan(parts: list[tuple[str, Part]], splits: tuple[str, ...], version_dir: str,
          name: str, compression: str, size: ShardSize) -> Iterable[tuple]:
    """(split, final path, [parts]) per final shard, and a marker per empty split."""
    by_split: dict[str, list[Part]] = {s: [] for s in splits}
    for split, part in parts:
        by_split.setdefault(split, []).append(part)
    for split, split_parts in sorted(by_split.items()):
        groups = plan_shards(split_parts, size)
        for index, group in enumerate(groups):
            path = resolve_in_version(
                version_dir, shard_file_name(name, index, len(groups), compression), split=split)
            yield split, path, tuple(group)


def _finalize_index(group: tuple[Part, ...], path: str) -> None:
    """The shard's index (``<version>/index/<split>/<shard>.index``, outside the split folder):
    the parts' indexes, offsets shifted by the bytes before each part."""
    final = index_path(path)
    if storage.exists(final) and not any(storage.exists(p.path + INDEX_SUFFIX) for p in group):
        return  # done by an earlier attempt
    lines, shift = [], 0
    for part in group:
        for line in storage.read_text(part.path + INDEX_SUFFIX).splitlines():
            offset, length = line.split()
            lines.append(f"{int(offset) + shift} {length}\n")
        shift += part.bytes
    storage.write_atomic(final, "".join(lines).encode())


_SHARDS = Metrics.counter("tfrecord_sink", "shards_finalized")


def _finalize_shard(entry: tuple[str, str, tuple[Part, ...]], index: bool = False) -> ShardInfo:
    """Produce one final shard from its parts. Safe to run twice (Beam may retry)."""
    split, path, group = entry
    if index:
        _finalize_index(group, path)
    records = sum(p.records for p in group)
    expected = sum(p.bytes for p in group)
    if len(group) == 1 and group[0].crc32c is not None:
        part = group[0]  # moved without a lookup first: a missing part is found by the move
        if storage.rename_many([(part.path, path)]) and not storage.exists(path):
            raise FileNotFoundError(f"staged part {part.path} and final shard {path} are both "
                                    "missing")
        size, crc = part.bytes, part.crc32c
    elif tff.compression_from_name(group[0].path) == tff.ZLIB:
        size, crc = _reencode_zlib([p.path for p in group], path)
    else:
        known = ([(p.bytes, p.crc32c) for p in group]
                 if all(p.crc32c is not None for p in group) else None)
        size, crc = storage.concatenate([p.path for p in group], path, known)
    if size != expected and tff.compression_from_name(path) != tff.ZLIB:
        raise OSError(f"shard {path} has {size} bytes, its parts add up to {expected}")
    _SHARDS.inc()
    return ShardInfo(split, path, records, size, crc, index_path(path) if index else "")


def _finalize_shards(entries: list, index: bool = False) -> list[ShardInfo]:
    """:func:`_finalize_shard` of many entries, in order, where one step finalizes them all:
    the shards made of a single part are moved together (``storage.rename_many``: on Cloud
    Storage a batch of copies and one of deletes per 100 shards, no lookup per shard), the
    others one by one. Safe to run twice: a part already moved is found under its final
    name."""
    single = [not index and len(group) == 1 and group[0].crc32c is not None
              for _, _, group in entries]
    moves = [(group[0].path, path) for (_, path, group), one in zip(entries, single) if one]
    lost = [(source, final) for source, final in storage.rename_many(moves)
            if not storage.exists(final)]
    if lost:
        raise FileNotFoundError(f"staged part {lost[0][0]} and final shard {lost[0][1]} are "
                                "both missing")
    shards = []
    for (split, path, group), one in zip(entries, single):
        if not one:
            shards.append(_finalize_shard((split, path, group), index))
            continue
        part = group[0]
        _SHARDS.inc()
        shards.append(ShardInfo(split, path, part.records, part.bytes, part.crc32c))
    return shards


def _reencode_zlib(sources: list[str], destination: str) -> tuple[int, int]:
    """Join ZLIB parts by re-encoding: concatenated ZLIB streams lose data in TensorFlow."""
    tmp = f"{destination}.tmp-{uuid.uuid4().hex}"
    out = storage.CrcCountingWriter(storage.open_write(tmp))
    writer = tff.TFRecordWriter(out, tff.ZLIB)
    for source in sources:
        with storage.open_read(source) as handle:
            for record in tff.iter_records(handle, tff.ZLIB, path=source):
                writer.write(record)
    writer.close()
    out.close()
    storage.rename(tmp, destination)
    return out.bytes, out.crc32c


class WriteTFRecordShards(WriteShards):
    """Writes ``(split, bytes | SerializedBatch)`` elements as sharded TFRecord files, in the
    order they arrive: staged parts rolled at the target size, then planned and joined.

    Takes :class:`sinks.shard_writers.WriteShards`' arguments and returns one element,
    ``{split: [ShardInfo, ...]}``.
    """

    WRITE_STEP = "WriteParts"  # (split, Part)

    def _writer(self, progress_dir: str | None) -> _WriteParts:
        return _WriteParts(self._staging, self._compression, self._size, self._index,
                           progress_dir, self._lease, self._duplicates)

    def _planner(self) -> Callable[..., Iterable]:
        return _plan

    def _finalize(self) -> Callable[[Any], ShardInfo]:
        return functools.partial(_finalize_shard, index=self._index)

    def _finalize_all(self) -> Callable[[list], list[ShardInfo]]:
        return functools.partial(_finalize_shards, index=self._index)
