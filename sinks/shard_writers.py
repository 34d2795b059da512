"""What the two shard writers share: the write step's bundle bookkeeping, the transform's
checks and shape, and the steps after the writers (plan, finalize, group).

The plain writer (``sinks/tfrecord_sink.py``) stages size-rolled parts; the shuffled one
(``sinks/shuffled_shards.py``) stages sorted runs. Both take ``(split, bytes |
SerializedBatch)``, name each staged file after its bundle attempt (a retried bundle never
collides with the one it replaces), keep the job's lease alive while a bundle writes, leave
running totals for a progress line, emit their staged files' descriptors when the bundle ends,
and hand them to :func:`commit_shards`. With ``duplicates`` on they also fingerprint every
record they write and hand the fingerprints on (sinks/duplicates.py). Each subclass says how
records are staged, planned and finalized; nothing else differs.
"""

from __future__ import annotations

import dataclasses
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_tfrecords.runtime.bundle_output import finish_bundle_outputs
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.runtime.spread import Spread, runs_in_one_process
from beam_tfrecords.sinks.duplicates import CountDuplicates, FingerprintTally, is_share
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.layout import resolve_in_version
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.lease import JobLease, run_held
from beam_tfrecords.sinks.progress_files import ProgressFile, ProgressOptions

__all__ = ["ShardInfo", "ShardWriterFn", "WriteShards", "commit_shards", "group_shards",
           "shard_file_name"]


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
    """``<name>-SSSSS-of-NNNNN<suffix>``: a final shard's file name.

    Args:
        name: the shards' file name prefix.
        index: the shard's number in its split, from 0.
        total: the split's shard count.
        compression: ``none``, ``gzip`` or ``zlib`` (the suffix follows it).

    Returns:
        The file name, without a folder.
    """
    suffix = tff.file_suffix(compression)
    return f"{name}-{index:05d}-of-{total:05d}{suffix}"



def group_shards(shards: list[ShardInfo], splits: tuple[str, ...]) -> dict[str, list[ShardInfo]]:
    """The shards by split, each split's in shard-number order (every split named, empty or
    not). A split's paths differ only in the number, which grows past five digits from
    shard 100,000 on: shorter paths come first, then path order.

    Args:
        shards: the finalized shards, in any order.
        splits: every split name.

    Returns:
        ``{split: [ShardInfo, ...]}``.
    """
    out: dict[str, list[ShardInfo]] = {s: [] for s in splits}
    for shard in sorted(shards, key=lambda s: (len(s.path), s.path)):
        out.setdefault(shard.split, []).append(shard)
    return out


def _group_all(_impulse: bytes, shards: list[ShardInfo], splits: tuple[str, ...]
               ) -> dict[str, list[ShardInfo]]:
    return group_shards(shards, splits)


def _plan_finalize_group(_impulse: bytes, parts: list, plan: Callable[[list], Iterable],
                         finalize: Callable[[Any], ShardInfo], splits: tuple[str, ...],
                         finalize_all: Callable[[list], list[ShardInfo]] | None = None
                         ) -> dict[str, list[ShardInfo]]:
    """Plan, finalize and group in one step: for a single worker, where spreading gains nothing.
    ``finalize_all`` (when the sink has one) finalizes every entry at once, in order.
    """
    entries = list(plan(parts))
    shards = (finalize_all(entries) if finalize_all is not None
              else [finalize(entry) for entry in entries])
    return group_shards(shards, splits)


def _not_share(element: Any) -> bool:
    return not is_share(element)


def _plan_each(_impulse: bytes, parts: list, plan: Callable[[list], Iterable]) -> Iterable:
    return plan(parts)


def commit_shards(parts, plan: Callable[[list], Iterable], finalize: Callable[[Any], ShardInfo],
                  splits: tuple[str, ...], lease: JobLease | None = None,
                  finalize_all: Callable[[list], list[ShardInfo]] | None = None):
    """The steps after the writers, shared by both sinks: ``plan(all parts)`` -> entries,
    ``finalize(entry)`` -> ShardInfo, grouped as ``{split: [ShardInfo]}`` (one element).

    The parts and the shards are small descriptors: they reach the planning and the grouping as
    side inputs of an Impulse, which costs Beam far less to construct and translate than a
    ToList (a CombineGlobally) each. On a single in-process worker the three are one step;
    elsewhere the finalize is spread over the workers.

    Args:
        parts: the writers' output, ``(split, staged file)`` elements.
        plan: a picklable callable (a module function, a partial): every part -> entries.
        finalize: a picklable callable: one entry -> its final shard's ShardInfo.
        splits: every split name, so an empty split still appears in the result.
        lease: the job's lease, kept alive by the steps that finalize; None: none.
        finalize_all: a picklable callable: every entry -> their ShardInfos, in order, for
            the single step (where one call can batch what the entries share, such as
            moves on Cloud Storage); None: ``finalize`` per entry.

    Returns:
        A PCollection of one element, ``{split: [ShardInfo, ...]}``.
    """
    pipeline = parts.pipeline
    if runs_in_one_process(pipeline.runner, pipeline.options):
        return (pipeline
                | "CommitTrigger" >> beam.Impulse()
                | "PlanFinalizeGroup" >> beam.Map(
                    functools.partial(run_held, lease, _plan_finalize_group),
                    beam.pvalue.AsList(parts), plan, finalize, splits, finalize_all))
    planned = (pipeline
               | "PlanTrigger" >> beam.Impulse()
               | "PlanShards" >> beam.FlatMap(_plan_each, beam.pvalue.AsList(parts), plan))
    shards = (planned
              | "SpreadFinalize" >> Spread()
              | "FinalizeShards" >> beam.Map(functools.partial(run_held, lease, finalize)))
    return (pipeline
            | "GatherTrigger" >> beam.Impulse()
            | "GroupBySplit" >> beam.Map(_group_all, beam.pvalue.AsList(shards), splits))


class ShardWriterFn(beam.DoFn):
    """``(split, bytes | SerializedBatch)`` -> ``(split, staged file)``, emitted when the
    bundle ends.

    Subclasses stage the records (:meth:`_write`), say how many bytes they have staged or
    hold (:meth:`_stored_bytes`, for the progress line) and put everything still open into
    ``self._done`` at the bundle's end (:meth:`_flush`). Staged files are named by
    :meth:`_staged_path`, unique per bundle attempt.

    Args:
        staging: the build's staging folder.
        progress_dir: where to leave this writer's running totals for a launcher's progress
            line (``sinks/progress_files.py``); None: none.
        lease: the job's lease on the output, kept alive while the bundle writes; None: none.
        duplicates: fingerprint every record written (:meth:`_note`) and emit the
            fingerprints beside the staged files (``sinks.duplicates.FingerprintShare``).
    """

    def __init__(self, staging: str, progress_dir: str | None = None,
                 lease: JobLease | None = None, duplicates: bool = False) -> None:
        self._lease = lease
        self._duplicates = duplicates
        self._staging = staging
        self._progress_dir = progress_dir
        self._progress: ProgressFile | None = None  # made per instance, in the worker
        self._total_records = 0  # this instance's, across bundles, for the progress file
        self._reported = 0
        self._records = Metrics.counter("tfrecord_sink", "records_written")

    def start_bundle(self) -> None:
        if self._lease is not None:
            self._lease.begin(self)
        self._done: list[tuple[str, Any]] = []
        self._attempt = uuid.uuid4().hex  # unique per bundle attempt: retries never collide
        self._count = 0
        self._tally = FingerprintTally() if self._duplicates else None
        self._start_bundle()

    def _start_bundle(self) -> None:
        """The subclass's per-bundle state."""

    def _staged_path(self, split: str, suffix: str, within: tuple[str, ...] = ()) -> str:
        """A new staged file of ``split``: ``<attempt>-<count><suffix>``."""
        self._count += 1
        return resolve_in_version(self._staging, f"{self._attempt}-{self._count:05d}{suffix}",
                                  within=within, split=split)

    def process(self, element: tuple[str, Any], after: Any = None) -> list[Any] | None:
        # ``after``: WriteShards' ``after`` side input, only waited for.
        split, records = element  # (split, bytes | SerializedBatch)
        if isinstance(records, (bytes, bytearray, memoryview)):
            records = SerializedBatch.from_records([bytes(records)])
        if not len(records):
            return  # (a bare return: Beam warns of "return None" in a process method)
        self._write(split, records)
        self._records.inc(len(records))
        self._total_records += len(records)
        self._after_write()
        if self._progress_dir:
            self._report_progress()
        if self._tally is not None and self._tally.full:  # handed on before the bundle ends
            return list(self._tally.drain())

    def _write(self, split: str, records: SerializedBatch) -> None:
        """Stage the records; call :meth:`_note` with their plain CRC-32Cs when
        :attr:`_counts_duplicates` (the subclass computes them for framing anyway)."""
        raise NotImplementedError

    @property
    def _counts_duplicates(self) -> bool:
        return self._tally is not None

    def _note(self, split: str, records: SerializedBatch, crcs: Any,
              slices: list | None = None) -> None:
        """Fingerprint records written to ``split`` (their plain CRC-32Cs ``crcs``; ``slices``:
        the records as ``tfrecord_format.record_slices`` gave them, when taken)."""
        if self._tally is not None:
            self._tally.note(split, records, crcs, slices)

    def _after_write(self) -> None:
        """What the subclass does once a batch is counted (a spill when its buffers are full).
        """

    def _stored_bytes(self) -> int:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError

    def _report_progress(self, force: bool = False) -> None:
        if self._progress is None:
            self._progress = ProgressFile(self._progress_dir)  # type: ignore[arg-type]
        if self._total_records != self._reported and (force or self._progress.due()):
            self._progress.write(self._total_records, self._stored_bytes())
            self._reported = self._total_records

    def finish_bundle(self) -> Iterator[Any]:
        self._flush()
        if self._progress_dir:
            self._report_progress(force=True)
        yield from finish_bundle_outputs(self._done)
        self._done = []
        if self._tally is not None:
            yield from finish_bundle_outputs(self._tally.drain())
        if self._lease is not None:
            self._lease.end(self)


class WriteShards(beam.PTransform):
    """The shape both shard writers share: a write step, then :func:`commit_shards`.

    Subclasses name their write step (``WRITE_STEP``), make its DoFn (:meth:`_writer`) and
    give the plan function (:meth:`_planner`: ``(parts, splits, version_dir, name,
    compression, size)`` -> entries) and the finalize function (:meth:`_finalize`), both
    picklable (module functions, partials).

    Args:
        version_dir: the directory the final shards go to (``<version_dir>/<split>/...``).
        staging_dir: where staged files are written first; deleted by the caller after the
            commit.
        name: the shards' file name prefix.
        splits: every split name, so an empty split still appears in the result.
        compression: ``none``, ``gzip`` or ``zlib``.
        size: the shard-size band on stored bytes.
        index: also write index sidecars ``<version_dir>/index/<split>/<shard>.index``
            (``offset length`` per record, as DALI's tfrecord2idx; only for uncompressed
            shards, where offsets address the file directly).
        progress_dir: where writers leave running totals for a progress line; default: the
            pipeline option ``--tfrecords_progress_dir``, else none.
        lease: the job's lease on the output, kept alive by the writing and finalizing
            bundles (``sinks/lease.JobLease``); None: none.
        after: a PCollection of one element that must exist before anything is written (the
            claim of the version folder); a side input of the write step, so no step of its
            own. None: none.
        duplicates: also count duplicate records per split and records in several splits
            (sinks/duplicates.py).

    Returns a PCollection with one element, ``{split: [ShardInfo, ...]}``; with
    ``duplicates``, its attribute ``duplicates`` is the PCollection of the buckets' results
    (``sinks.format.duplicates.BucketResult``), which the commit adds up.
    """

    WRITE_STEP = ""

    def __init__(self, version_dir: str, staging_dir: str, name: str, splits: tuple[str, ...],
                 compression: str = tff.NONE, size: ShardSize = ShardSize(),
                 index: bool = False, progress_dir: str | None = None,
                 lease: JobLease | None = None, after: Any = None,
                 duplicates: bool = False) -> None:
        super().__init__()
        compression = tff.normalize_compression(compression)
        if index and compression != tff.NONE:
            raise ValueError("index sidecars need uncompressed shards: offsets into a "
                             f"{compression} stream do not address the file")
        self._version_dir = version_dir
        self._staging = staging_dir
        self._name = name
        self._splits = tuple(splits)
        self._compression = compression
        self._size = size
        self._index = index
        self._progress_dir = progress_dir
        self._lease = lease
        self._after = after
        self._duplicates = duplicates

    def _writer(self, progress_dir: str | None) -> ShardWriterFn:
        raise NotImplementedError

    def _planner(self) -> Callable[..., Iterable]:
        raise NotImplementedError

    def _finalize(self) -> Callable[[Any], ShardInfo]:
        raise NotImplementedError

    def _finalize_all(self) -> Callable[[list], list[ShardInfo]] | None:
        """Every entry at once, in order (see :func:`commit_shards`); None: per entry."""
        return None

    def expand(self, records):
        progress_dir = self._progress_dir
        if progress_dir is None and records.pipeline.options is not None:
            progress_dir = records.pipeline.options.view_as(ProgressOptions).tfrecords_progress_dir
        after = () if self._after is None else (beam.pvalue.AsSingleton(self._after),)
        written = records | self.WRITE_STEP >> beam.ParDo(self._writer(progress_dir), *after)
        parts = written  # (split, staged file)
        if self._duplicates:  # and FingerprintShares
            parts = written | "StagedFiles" >> beam.Filter(_not_share)
        plan = functools.partial(self._planner(), splits=self._splits,
                                 version_dir=self._version_dir, name=self._name,
                                 compression=self._compression, size=self._size)
        shards = commit_shards(parts, plan, self._finalize(), self._splits,
                               self._lease, self._finalize_all())  # {split: [ShardInfo]}
        if self._duplicates:
            shards.duplicates = written | "CountDuplicates" >> CountDuplicates()
        return shards
