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
   a fixed cost (~20 ms: a bundle and its state sampler thread, bench/README.md), so there
   the three are one step that plans, finalizes the shards one after another and groups
   them. Both shapes call the same functions and write the same shards.

The output is one element: ``{split: [ShardInfo, ...]}``, which the manifest step consumes.
Nothing here writes the manifest: the caller does, last, as the commit point.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from beam_tfrecords.runtime import storage
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.runtime.spread import Spread, runs_in_one_process
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import INDEX_SUFFIX, index_path, resolve_in_version
from beam_tfrecords.sinks.format.shard_plan import Part, ShardSize, plan_shards, should_roll_before
from beam_tfrecords.sinks.lease import JobLease, run_held
from beam_tfrecords.sinks.progress_files import ProgressFile, ProgressOptions

__all__ = ["ShardInfo", "WriteTFRecordShards", "commit_shards", "group_shards",
           "shard_file_name"]

_LOG = logging.getLogger(__name__)
# Mean record size from which records are written piece by piece (header, data, footer)
# instead of being copied into one framed buffer first: images, audio, large tensors.
_PIECEWISE_RECORD_BYTES = 32 * 1024


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """A final shard: its path, record count, stored bytes and crc32c of the whole file."""

    split: str
    path: str
    records: int
    bytes: int
    crc32c: int
    index: str = ""  # path of the index sidecar, when one was written


def shard_file_name(name: str, index: int, total: int, compression: str) -> str:
    suffix = tff.file_suffix(compression)
    return f"{name}-{index:05d}-of-{total:05d}{suffix}"


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


class _WriteParts(beam.DoFn):
    """Streams (split, records) into staged, size-rolled files; emits (split, Part).

    With ``progress_dir`` it also leaves its running totals there for a launcher's progress
    line (``sinks/progress_files.py``): a clock read per batch, a small file every few seconds.
    With ``lease`` its bundles keep the job's lease on the output alive while they write.
    """

    def __init__(self, staging: str, compression: str, size: ShardSize,
                 index: bool = False, progress_dir: str | None = None,
                 lease: JobLease | None = None) -> None:
        self._lease = lease
        self._staging = staging
        self._progress_dir = progress_dir
        self._progress: ProgressFile | None = None  # made per instance, in the worker
        self._total_records = 0  # this instance's, across bundles, for the progress file
        self._closed_bytes = 0
        self._reported = 0
        self._index = index
        self._compression = compression
        self._size = size
        self._records = Metrics.counter("tfrecord_sink", "records_written")
        self._parts = Metrics.counter("tfrecord_sink", "parts_written")
        self._oversized = Metrics.counter("tfrecord_sink", "records_over_max_shard_size")
        self._bytes = Metrics.counter("tfrecord_sink", "bytes_written")
        self._bundles = Metrics.counter("tfrecord_sink", "bundles_written")

    def start_bundle(self) -> None:
        if self._lease is not None:
            self._lease.begin(self)
        self._open: dict[str, _PartWriter] = {}
        self._done: list[tuple[str, Part]] = []
        self._attempt = uuid.uuid4().hex  # unique per bundle attempt: retries never collide
        self._count = 0

    def _new_writer(self, split: str) -> _PartWriter:
        self._count += 1
        path = resolve_in_version(self._staging, f"{self._attempt}-{self._count:05d}"
                                  f"{tff.file_suffix(self._compression)}", split=split)
        writer = _PartWriter(path, self._compression, self._index)
        self._open[split] = writer
        return writer

    def _roll(self, split: str) -> None:
        part = self._open.pop(split).close()
        self._parts.inc()
        self._bytes.inc(part.bytes)
        self._closed_bytes += part.bytes
        self._done.append((split, part))

    def _report_progress(self, force: bool = False) -> None:
        if self._progress is None:
            self._progress = ProgressFile(self._progress_dir)  # type: ignore[arg-type]
        if self._total_records != self._reported and (force or self._progress.due()):
            stored = self._closed_bytes + sum(w.stored_estimate() for w in self._open.values())
            self._progress.write(self._total_records, stored)
            self._reported = self._total_records

    def process(self, element: tuple[str, Any]) -> None:
        split, records = element  # (split, bytes | SerializedBatch)
        if isinstance(records, (bytes, bytearray, memoryview)):
            records = SerializedBatch.from_records([bytes(records)])
        if not len(records):
            return
        bounds = records.offsets + tff.FRAME_OVERHEAD * np.arange(len(records) + 1)
        if records.pieces is not None:  # large records still in the encoder's pieces
            sizes = np.diff(records.offsets).tolist()
            buffers, starts = tff.frame_record_pieces(records.pieces, sizes)
            self._write_framed(split, bounds, lambda w, i, j: w.write_pieces(
                buffers[starts[i]:starts[j]], j - i, sizes[i:j]))
        elif records.nbytes >= _PIECEWISE_RECORD_BYTES * len(records):
            pieces = tff.frame_pieces(records.payload, records.offsets)
            self._write_framed(split, bounds, lambda w, i, j: w.write_pieces(
                pieces[3 * i:3 * j], j - i))
        else:
            framed = memoryview(tff.frame_batch(records.payload, records.offsets))
            self._write_framed(split, bounds, lambda w, i, j: w.write_framed(
                framed[bounds[i]:bounds[j]], j - i,
                sizes=(np.diff(bounds[i:j + 1]) - tff.FRAME_OVERHEAD).tolist() if self._index
                else None))
        self._records.inc(len(records))
        self._total_records += len(records)
        if self._progress_dir:
            self._report_progress()

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

    def finish_bundle(self) -> Iterable[beam.utils.windowed_value.WindowedValue]:
        if self._open:
            self._bundles.inc()
        for split in list(self._open):
            self._roll(split)
        if self._progress_dir:
            self._report_progress(force=True)
        for split, part in self._done:
            yield beam.utils.windowed_value.WindowedValue(
                (split, part), -1, [beam.transforms.window.GlobalWindow()]
            )
        self._done = []
        if self._lease is not None:
            self._lease.end(self)


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
        part = group[0]
        if storage.exists(part.path):
            storage.rename(part.path, path)
        elif not storage.exists(path):
            raise FileNotFoundError(f"staged part {part.path} and final shard {path} are both "
                                    "missing")
        size, crc = part.bytes, part.crc32c
    elif tff.compression_from_name(group[0].path) == tff.ZLIB:
        size, crc = _reencode_zlib([p.path for p in group], path)
    else:
        size, crc = storage.concatenate([p.path for p in group], path)
    if size != expected and tff.compression_from_name(path) != tff.ZLIB:
        raise OSError(f"shard {path} has {size} bytes, its parts add up to {expected}")
    _SHARDS.inc()
    return ShardInfo(split, path, records, size, crc, index_path(path) if index else "")


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


def group_shards(shards: list[ShardInfo], splits: tuple[str, ...]) -> dict[str, list[ShardInfo]]:
    out: dict[str, list[ShardInfo]] = {s: [] for s in splits}
    for shard in sorted(shards, key=lambda s: s.path):
        out.setdefault(shard.split, []).append(shard)
    return out


def _group_all(_impulse: bytes, shards: list[ShardInfo], splits: tuple[str, ...]
               ) -> dict[str, list[ShardInfo]]:
    return group_shards(shards, splits)


def _plan_finalize_group(_impulse: bytes, parts: list, plan: Callable[[list], Iterable],
                         finalize: Callable[[Any], ShardInfo], splits: tuple[str, ...]
                         ) -> dict[str, list[ShardInfo]]:
    """Plan, finalize and group in one step: for a single worker, where spreading gains nothing.
    """
    return group_shards([finalize(entry) for entry in plan(parts)], splits)


def _plan_each(_impulse: bytes, parts: list, plan: Callable[[list], Iterable]) -> Iterable:
    return plan(parts)


def commit_shards(parts, plan: Callable[[list], Iterable], finalize: Callable[[Any], ShardInfo],
                  splits: tuple[str, ...], lease: JobLease | None = None):
    """The steps after the writers, shared by both sinks: ``plan(all parts)`` -> entries,
    ``finalize(entry)`` -> ShardInfo, grouped as ``{split: [ShardInfo]}`` (one element).

    ``plan`` and ``finalize`` are picklable callables (module functions, partials). The parts
    and the shards are small descriptors: they reach the planning and the grouping as side
    inputs of an Impulse, which costs Beam far less to construct and translate than a ToList
    (a CombineGlobally) each. On a single in-process worker the three are one step; elsewhere
    the finalize is spread over the workers. With ``lease``, the steps that finalize keep
    the job's lease alive while they run."""
    pipeline = parts.pipeline
    if runs_in_one_process(pipeline.runner, pipeline.options):
        return (pipeline
                | "CommitTrigger" >> beam.Impulse()
                | "PlanFinalizeGroup" >> beam.Map(
                    functools.partial(run_held, lease, _plan_finalize_group),
                    beam.pvalue.AsList(parts), plan, finalize, splits))
    planned = (pipeline
               | "PlanTrigger" >> beam.Impulse()
               | "PlanShards" >> beam.FlatMap(_plan_each, beam.pvalue.AsList(parts), plan))
    shards = (planned
              | "SpreadFinalize" >> Spread()
              | "FinalizeShards" >> beam.Map(functools.partial(run_held, lease, finalize)))
    return (pipeline
            | "GatherTrigger" >> beam.Impulse()
            | "GroupBySplit" >> beam.Map(_group_all, beam.pvalue.AsList(shards), splits))


class WriteTFRecordShards(beam.PTransform):
    """Writes ``(split, bytes | SerializedBatch)`` elements as sharded TFRecord files.

    Args:
      version_dir: the directory the final shards go to (``<version_dir>/<split>/...``).
      staging_dir: where parts are written first; deleted by the caller after the commit.
      name: the shards' file name prefix.
      splits: every split name, so an empty split still appears in the result.
      compression: ``none``, ``gzip`` or ``zlib``.
      size: the shard-size band on stored bytes.
      index: also write index sidecars ``<version_dir>/index/<split>/<shard>.index``
        (``offset length`` per record, as DALI's tfrecord2idx; only for uncompressed shards,
        where offsets address the file directly).
      progress_dir: where writers leave running totals for a progress line; default: the
        pipeline option ``--tfrecords_progress_dir``, else none.
      lease: the job's lease on the output, kept alive by the writing and finalizing
        bundles (``sinks/lease.JobLease``); None: none.

    Returns a PCollection with one element, ``{split: [ShardInfo, ...]}``.
    """

    def __init__(self, version_dir: str, staging_dir: str, name: str, splits: tuple[str, ...],
                 compression: str = tff.NONE, size: ShardSize = ShardSize(),
                 index: bool = False, progress_dir: str | None = None,
                 lease: JobLease | None = None) -> None:
        super().__init__()
        self._lease = lease
        self._progress_dir = progress_dir
        compression = tff.normalize_compression(compression)
        if index and compression != tff.NONE:
            raise ValueError("index sidecars need uncompressed shards: offsets into a "
                             f"{compression} stream do not address the file")
        self._index = index
        self._version_dir = version_dir
        self._staging = staging_dir
        self._name = name
        self._splits = tuple(splits)
        self._compression = compression
        self._size = size

    def expand(self, records):
        progress_dir = self._progress_dir
        if progress_dir is None and records.pipeline.options is not None:
            progress_dir = records.pipeline.options.view_as(ProgressOptions).tfrecords_progress_dir
        parts = records | "WriteParts" >> beam.ParDo(
            _WriteParts(self._staging, self._compression, self._size, self._index, progress_dir,
                        self._lease)
        )  # (split, Part)
        plan = functools.partial(_plan, splits=self._splits, version_dir=self._version_dir,
                                 name=self._name, compression=self._compression,
                                 size=self._size)
        return commit_shards(parts, plan, functools.partial(_finalize_shard, index=self._index),
                             self._splits, self._lease)  # {split: [ShardInfo]}
