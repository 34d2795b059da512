"""``WriteShuffledShards``: shards in a seeded pseudo-random order, byte-identical on any runner.

The ``output.shuffle`` path of the sink (the unshuffled one is sinks/tfrecord_sink.py). Every
record gets a key made of its own bytes and the seed (sinks/format/shuffle_plan.py); the
shards are ranges of keys and each is written in key order. Nothing depends on how the input
was split into bundles, workers or runners, so two builds of the same records with the same
seed write the same bytes -- compressed or not.

How, in bounded memory and without a GroupByKey carrying the data:

1. Runs -- each writer frames the records it receives and buffers them per split; at
   :data:`shuffle_plan.RUN_BYTES` (and when its bundle ends) it sorts the buffer by key and
   spills it to staging as a *run*: the framed records in key order, a ``.keys`` sidecar
   (each record's key and framed size) and, in the element it emits, how many records and
   bytes each of the 4,096 key cells holds.
2. Plan -- the cells' totals (content-determined) give each split's shard count and key
   ranges. For GZIP and ZLIB the stored size is estimated from a sample that is itself
   content-determined: the first cells' records, ordered and compressed.
3. Finalize -- each shard reads its key range from every run in pieces of about
   :data:`WINDOW_BYTES` (whole cells; the range's edges filtered by key), orders each piece by
   key (ties by bytes) and appends it to the shard, compressed as one stream, under a
   temporary name it then renames. A piece's records all sort before the next piece's, so
   a shard of any size is written in order holding one piece at a time.

As in the unshuffled sink, plan, finalize and grouping are one step on a single in-process
worker and three (the finalize spread over workers) elsewhere. The cost: every byte is
written twice (run, shard) and read once more than unshuffled; on Dataflow the runs and
shards go through Cloud Storage, and each shard makes one ranged read per run
(bench/README.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from apache_beam.metrics import Metrics

from beam_tfrecords.runtime import storage
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format import shuffle_plan as sp
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import SHUFFLE, index_path, resolve_in_version
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.lease import JobLease
from beam_tfrecords.sinks.shard_writers import (
    ShardInfo,
    ShardWriterFn,
    WriteShards,
    shard_file_name,
)

__all__ = ["RunPart", "WriteShuffledShards"]

_LOG = logging.getLogger(__name__)
KEYS_SUFFIX = ".keys"
# Mean record size from which a writer keeps records as pieces (views of their batch) instead
# of copying them into one framed buffer: images, audio, large tensors.
_PIECEWISE_RECORD_BYTES = 32 * 1024
# Framed bytes of the first cells a compressed split's ratio is measured on.
_RATIO_SAMPLE_BYTES = 8 * 2**20
# Framed bytes a shard's finalize holds at a time: it reads, orders and writes its key range
# in pieces of about this size (whole cells: a piece can be larger by one cell).
WINDOW_BYTES = 32 * 2**20


@dataclasses.dataclass(frozen=True)
class RunPart:
    """One sorted run a writer spilled: framed records in key order at ``path``, their keys
    and framed sizes at ``path + .keys``, and its census by cell."""

    path: str
    records: int
    bytes: int
    cells: sp.RunCells


@dataclasses.dataclass(frozen=True)
class _Window:
    """A key range of a shard, written in one piece, and each run's slice holding it."""

    lo: int
    hi: int
    slices: np.ndarray  # (runs, 4): first record, end record, first byte, end byte


@dataclasses.dataclass(frozen=True)
class _ShardEntry:
    """One planned shard: its key range, its split's runs ``(path, records)`` and the windows
    it is written in. Only slices travel, not the runs' censuses: an entry grows with runs x
    windows, a few numbers each."""

    split: str
    path: str
    lo: int
    hi: int
    runs: tuple[tuple[str, int], ...]
    windows: tuple[_Window, ...]


class _SplitBuffer:
    """One split's records waiting to be sorted and spilled: small ones framed into one
    buffer (grown in place: no join copy at the spill), large ones (images, tensors) as
    header, data and footer pieces -- the data a view of the batch, never copied."""

    def __init__(self) -> None:
        self.framed = bytearray()
        self.sizes: list[np.ndarray] = []  # framed sizes of the small records
        self.keys: list[np.ndarray] = []
        self.pieces: list = []  # per large record, the buffers that frame it
        self.large_sizes: list[np.ndarray] = []
        self.large_keys: list[np.ndarray] = []
        self.large_bytes = 0

    @property
    def nbytes(self) -> int:
        return len(self.framed) + self.large_bytes

    def add(self, records: SerializedBatch, crcs: np.ndarray, keys: np.ndarray) -> None:
        sizes = np.diff(records.offsets) + tff.FRAME_OVERHEAD
        if records.pieces is not None:  # the encoder's pieces of large records, unjoined
            buffers, starts = tff.frame_record_pieces(
                records.pieces, (sizes - tff.FRAME_OVERHEAD).tolist(), crcs)
            self.pieces += [buffers[a:b] for a, b in zip(starts, starts[1:])]
            self.large_sizes.append(sizes)
            self.large_keys.append(keys)
            self.large_bytes += int(sizes.sum())
        elif records.nbytes >= _PIECEWISE_RECORD_BYTES * len(records):
            framed = tff.frame_pieces(records.payload, records.offsets, crcs)
            self.pieces += [framed[j:j + 3] for j in range(0, len(framed), 3)]
            self.large_sizes.append(sizes)
            self.large_keys.append(keys)
            self.large_bytes += int(sizes.sum())
        else:
            self.framed += tff.frame_batch(records.payload, records.offsets, crcs=crcs)
            self.sizes.append(sizes)
            self.keys.append(keys)

    def write_sorted(self, out: Any) -> tuple[np.ndarray, np.ndarray]:
        """Write every record to ``out`` in key order; return the keys and framed sizes in
        that order. Equal keys may come in any order here: finalize orders them by bytes."""
        sizes = np.concatenate(self.sizes + self.large_sizes)
        keys = np.concatenate(self.keys + self.large_keys)
        order = np.argsort(keys, kind="stable")
        n_small = sum(len(k) for k in self.keys)
        if not self.pieces:
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            for chunk, _ in sp.gather_framed(self.framed, starts, sizes, order):
                out.write(chunk)
            return keys[order], sizes[order]
        view = memoryview(self.framed)
        starts = np.concatenate(([0], np.cumsum(sizes[:n_small])[:-1])).tolist()
        small_sizes = sizes[:n_small].tolist()
        pieces = self.pieces
        buffers: list = []  # handed over in one call: views, nothing copied
        for i in order.tolist():
            if i < n_small:
                buffers.append(view[starts[i]:starts[i] + small_sizes[i]])
            else:
                buffers += pieces[i - n_small]
        out.writelines(buffers)
        return keys[order], sizes[order]


class _WriteRuns(ShardWriterFn):
    """(split, bytes | SerializedBatch) -> (split, RunPart): sorted runs in staging."""

    def __init__(self, staging: str, seed: int, progress_dir: str | None = None,
                 lease: JobLease | None = None, duplicates: bool = False) -> None:
        super().__init__(staging, progress_dir, lease, duplicates)
        self._seed = seed
        self._spilled_bytes = 0
        self._runs = Metrics.counter("tfrecord_sink", "shuffle_runs_written")
        self._bytes = Metrics.counter("tfrecord_sink", "shuffle_run_bytes")

    def _start_bundle(self) -> None:
        self._buffers: dict[str, _SplitBuffer] = {}
        self._writing: list = []  # run files still being written

    def _write(self, split: str, records: SerializedBatch) -> None:
        slices = None
        if records.pieces is not None:  # large records: never joined (an image, 2 GB of them)
            crcs = tff.record_piece_crcs(records.pieces)
            keys = sp.record_keys(None, records.offsets, crcs, self._seed,
                                  sp.sampled_bytes_of_pieces(records.pieces, records.offsets))
        else:
            slices = (tff.record_slices(records.payload, records.offsets)
                      if self._counts_duplicates else None)
            crcs = tff.record_crcs(records.payload, records.offsets, slices)
            keys = sp.record_keys(records.payload, records.offsets, crcs, self._seed)
        self._note(split, records, crcs, slices)
        self._buffers.setdefault(split, _SplitBuffer()).add(records, crcs, keys)

    def _after_write(self) -> None:
        if sum(b.nbytes for b in self._buffers.values()) >= sp.RUN_BYTES:
            self._spill_all()

    def _wait_for_runs(self) -> None:
        writing, self._writing = self._writing, []
        for out in writing:
            out.close()

    def _spill_all(self) -> None:
        for split in sorted(self._buffers):
            self._done.append((split, self._spill(split, self._buffers.pop(split))))

    def _spill(self, split: str, buffer: _SplitBuffer) -> RunPart:
        path = self._staged_path(split, ".run", within=(SHUFFLE,))
        # Locally a thread writes the run while the next one fills: one run at a time (the
        # previous is waited for here, so memory holds at most one run being written), and
        # every run is whole before the bundle hands its runs on.
        self._wait_for_runs()
        out = storage.open_counted_write(path)
        self._writing.append(out)
        keys, sizes = buffer.write_sorted(out)
        with storage.open_write(path + KEYS_SUFFIX) as out:
            out.write(keys.astype("<u8").tobytes())
            out.write(sizes.astype("<u4").tobytes())
        total = int(sizes.sum())
        self._runs.inc()
        self._bytes.inc(total)
        self._spilled_bytes += total
        return RunPart(path, len(keys), total, sp.run_cells(keys, sizes))

    def _stored_bytes(self) -> int:
        return self._spilled_bytes + sum(b.nbytes for b in self._buffers.values())

    def _flush(self) -> None:
        self._spill_all()
        self._wait_for_runs()  # every run whole on disk before any RunPart leaves


# -- reading runs back -----------------------------------------------------------------------

def _read_range(path: str, start: int, end: int, into: memoryview) -> None:
    """Bytes ``start:end`` of a staged run into ``into``; locally read straight into it."""
    if storage.is_local(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            got = 0
            while got < end - start:
                n = os.preadv(fd, [into[got:end - start]], start + got)
                if not n:
                    raise OSError(f"staged run {path} ended at byte {start + got}, expected "
                                  f"{end}")
                got += n
        finally:
            os.close(fd)
        return
    with storage.open_read(path) as handle:
        handle.seek(start)
        got = 0
        while got < end - start:
            data = handle.read(end - start - got)
            if not data:
                raise OSError(f"staged run {path} ended at byte {start + got}, expected "
                              f"{end}")
            into[got:got + len(data)] = data
            got += len(data)


def _ordered_records(runs: tuple[tuple[str, int], ...], slices: np.ndarray, lo: int, hi: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The framed records with keys in ``[lo, hi)`` from the runs' ``slices`` (the whole cells
    holding them, then filtered by key): (buffer, starts, sizes, order) -- ``order`` lists the
    records to write, by key, ties by bytes. Keys and sizes are read straight into arrays."""
    chosen_runs = [(run, row) for run, row in zip(runs, slices.tolist(), strict=True)
                   if row[1] > row[0]]
    # Uninitialised, not a zero-filled bytearray: every byte is read into it.
    buffer = np.empty(sum(row[3] - row[2] for _, row in chosen_runs), np.uint8)
    count = sum(row[1] - row[0] for _, row in chosen_runs)
    keys = np.empty(count, "<u8")
    sizes = np.empty(count, "<u4")
    view, at, row_at = memoryview(buffer).cast("B"), 0, 0
    for (path, records), (r0, r1, b0, b1) in chosen_runs:
        _read_range(path, b0, b1, view[at:at + b1 - b0])
        _read_range(path + KEYS_SUFFIX, 8 * r0, 8 * r1,
                    memoryview(keys[row_at:row_at + r1 - r0]).cast("B"))
        _read_range(path + KEYS_SUFFIX, 8 * records + 4 * r0, 8 * records + 4 * r1,
                    memoryview(sizes[row_at:row_at + r1 - r0]).cast("B"))
        if int(sizes[row_at:row_at + r1 - r0].sum(dtype=np.int64)) != b1 - b0:
            raise OSError(f"staged run {path}: records {r0}-{r1} should span bytes "
                          f"{b0}-{b1}")
        at, row_at = at + b1 - b0, row_at + r1 - r0
    starts = np.zeros(count, np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    inside = keys >= np.uint64(lo)
    if hi < sp.KEY_SPACE:
        inside &= keys < np.uint64(hi)

    def record_at(i: int) -> memoryview:
        return view[starts[i]:starts[i] + sizes[i]]

    if inside.all():  # a range of whole cells: no filtering, no index of the chosen
        return buffer, starts, sizes, sp.record_order(keys, record_at)
    chosen = np.flatnonzero(inside)
    order = sp.record_order(keys[chosen], lambda i: record_at(int(chosen[i])))
    return buffer, starts, sizes, chosen[order]


def _stored_ratio(runs: tuple[tuple[str, int], ...], index: sp.RunIndex, compression: str
                  ) -> float:
    """Stored bytes per framed byte for a compressed split: measured on its first cells (at
    least _RATIO_SAMPLE_BYTES, when the split has them), ordered as in a shard -- a sample
    fixed by the records and the seed, so the plan is too."""
    if compression == tff.NONE or not runs:
        return 1.0
    cumulative = np.cumsum(index.cell_bytes())
    last = min(int(np.searchsorted(cumulative, _RATIO_SAMPLE_BYTES)), sp.CELLS - 1)
    hi = (last + 1) * (sp.KEY_SPACE // sp.CELLS)
    buffer, starts, sizes, order = _ordered_records(runs, index.slices(0, hi), 0, hi)
    if not len(order):
        return 1.0
    sink = _CountingSink()
    stream = tff.StreamCompressor(sink, compression)
    for chunk, _ in sp.gather_framed(buffer, starts, sizes, order):
        stream.write(chunk)
    stream.close()
    return max(sink.bytes, 1) / max(int(sizes[order].sum()), 1)


class _CountingSink:
    """A file object that keeps only the number of bytes written to it."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def flush(self) -> None:
        pass


# -- plan, finalize, group ---------------------------------------------------------------------

def _plan(parts: list[tuple[str, RunPart]], splits: tuple[str, ...], version_dir: str,
          name: str, compression: str, size: ShardSize) -> Iterable[_ShardEntry]:
    by_split: dict[str, list[RunPart]] = {s: [] for s in splits}
    for split, part in parts:
        by_split.setdefault(split, []).append(part)
    for split, split_runs in sorted(by_split.items()):
        if not split_runs:
            continue
        split_runs.sort(key=lambda p: p.path)
        index = sp.RunIndex([run.cells for run in split_runs])
        runs = tuple((run.path, run.records) for run in split_runs)
        cell_bytes = index.cell_bytes()
        ranges = sp.plan_ranges(cell_bytes, _stored_ratio(runs, index, compression), size)
        for number, (lo, hi) in enumerate(ranges):
            path = resolve_in_version(
                version_dir, shard_file_name(name, number, len(ranges), compression), split=split)
            windows = tuple(_Window(a, b, index.slices(a, b))
                            for a, b in sp.windows(cell_bytes, lo, hi, WINDOW_BYTES))
            yield _ShardEntry(split, path, lo, hi, runs, windows)


_SHARDS = Metrics.counter("tfrecord_sink", "shards_finalized")


def _finalize(entry: _ShardEntry, compression: str, index: bool) -> ShardInfo:
    """Write one shard: its records in key order, one compressed stream, published by a
    rename from a temporary name. The shard is read, ordered and written window by window
    (key ranges of about :data:`WINDOW_BYTES`). Safe to run again (Beam may retry): the runs
    stay until the commit removes staging, and the same records give the same bytes."""
    tmp = f"{entry.path}.tmp-{uuid.uuid4().hex}"
    # Locally a thread writes while the next window is read and ordered; every buffer handed
    # to it is a fresh window's or a fresh gather's, never reused.
    out = storage.open_counted_write(tmp)
    stream = tff.StreamCompressor(out, compression)
    framed_sizes: list[np.ndarray] = []
    records = 0
    try:
        for window in entry.windows:
            buffer, starts, sizes, order = _ordered_records(entry.runs, window.slices,
                                                            window.lo, window.hi)
            for chunk, chunk_sizes in sp.gather_framed(buffer, starts, sizes, order):
                stream.write(chunk)
                if index:
                    framed_sizes.append(chunk_sizes)
            records += len(order)
            del buffer
        stream.close()
        out.close()
        storage.rename(tmp, entry.path)
    except BaseException:
        with contextlib.suppress(Exception):  # its own error is the one being raised
            out.close()
        if storage.exists(tmp):
            storage.delete([tmp])
        raise
    if index:
        framed = np.concatenate(framed_sizes) if framed_sizes else np.zeros(0, np.int64)
        offsets = np.concatenate(([0], np.cumsum(framed)[:-1]))
        lines = "".join(f"{o} {n}\n" for o, n in zip(offsets.tolist(), framed.tolist(),
                                                     strict=True))
        storage.write_atomic(index_path(entry.path), lines.encode())
    _SHARDS.inc()
    return ShardInfo(entry.split, entry.path, records, out.bytes, out.crc32c,
                     index_path(entry.path) if index else "")


class WriteShuffledShards(WriteShards):
    """Writes ``(split, bytes | SerializedBatch)`` elements as shards in a seeded order.

    Takes :class:`sinks.shard_writers.WriteShards`' arguments plus ``seed`` (any integer)
    and returns the same: one element, ``{split: [ShardInfo, ...]}``.

    Args:
        version_dir: the version folder the shards are committed to.
        staging_dir: where shards are written before the commit.
        name: the data set's name, which starts every shard's file name.
        splits: the splits' names.
        seed: the shuffle's seed; the same records and seed give the same shards.
        compression: ``none``, ``gzip`` or ``zlib``.
        size: the shard size band.
        index: write an index sidecar per shard.
        progress_dir: where progress files go, or None.
        lease: the job's lease, kept alive while bundles write.
        after: a PCollection of one element the writing waits for, or None.
        duplicates: also count duplicate records and records in several splits.

    Raises:
        ValueError: the seed is not an integer.
    """

    WRITE_STEP = "WriteRuns"  # (split, RunPart)

    def __init__(self, version_dir: str, staging_dir: str, name: str, splits: tuple[str, ...],
                 seed: int, compression: str = tff.NONE, size: ShardSize = ShardSize(),
                 index: bool = False, progress_dir: str | None = None,
                 lease: JobLease | None = None, after: Any = None,
                 duplicates: bool = False) -> None:
        super().__init__(version_dir, staging_dir, name, splits, compression, size, index,
                         progress_dir, lease, after, duplicates)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"a shuffle seed is an integer, not {seed!r}")
        self._seed = seed

    def _writer(self, progress_dir: str | None) -> _WriteRuns:
        return _WriteRuns(self._staging, self._seed, progress_dir, self._lease,
                          self._duplicates)

    def _planner(self) -> Callable[..., Iterable]:
        return _plan

    def _finalize(self) -> Callable[[Any], ShardInfo]:
        return functools.partial(_finalize, compression=self._compression, index=self._index)
