"""``CountDuplicates``: duplicate records per split and records in several splits, on any runner.

The shard writers fingerprint every record they write (sinks/format/duplicates.py: two CRCs
of different polynomials and the length; the CRC-32C is the one framing computes anyway) and
hand each bundle's fingerprints on, cut by bucket, as :class:`FingerprintShare` elements
beside their staged files (:class:`FingerprintTally`). :class:`DuplicatesCombineFn` merges
them per bucket -- a Beam ``CombineFn``, so every runner counts, each worker holding the
buckets it combines, each bucket in bounded memory (a sample of its fingerprints past its
capacity) -- and the commit adds the buckets' results up into the manifest's
``duplicates``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format import duplicates as dup

__all__ = ["DUPLICATE_KEYS", "CountDuplicates", "DuplicatesCombineFn", "FingerprintShare",
           "FingerprintTally", "is_share"]
# The encoder's tagged output of FingerprintShares of a configured key's values (records
# compared by that key instead of their bytes), and the Examples' entry that carries them.
DUPLICATE_KEYS = "duplicates"
# Fingerprints a writer holds before it hands them on (8 bytes each).
_FLUSH_RECORDS = 1 << 20


class FingerprintShare:
    """One bucket's share of a writer's fingerprints, ``(bucket, FingerprintCounts)``: a
    writer emits them on its main output beside its staged files (a tagged output of a step
    that retries lost its main output on Beam's BundleBasedDirectRunner), and
    :func:`is_share` tells them apart.

    Args:
        bucket: the bucket, from the fingerprints' low bits.
        counts: the writer's fingerprints in that bucket, with their copies per split.
    """

    __slots__ = ("bucket", "counts")

    def __init__(self, bucket: int, counts: dup.FingerprintCounts) -> None:
        self.bucket = bucket
        self.counts = counts

    def __reduce__(self):
        return FingerprintShare, (self.bucket, self.counts)


def is_share(element: Any) -> bool:
    """Whether a writer's output element is a :class:`FingerprintShare`.

    Args:
        element: an element of a shard writer's output.

    Returns:
        True for fingerprints, False for a staged file's ``(split, file)``.
    """
    return isinstance(element, FingerprintShare)


def _keyed(share: FingerprintShare) -> tuple[int, dup.FingerprintCounts]:
    return share.bucket, share.counts


class FingerprintTally:
    """A writer's fingerprints of the records it wrote since it last handed them on."""

    def __init__(self) -> None:
        self._counts = dup.FingerprintCounts()

    def note(self, split: str, records: SerializedBatch, crcs: np.ndarray,
             slices: list | None = None) -> None:
        """Fingerprint a batch of ``split`` whose plain CRC-32Cs are ``crcs``.

        Args:
            split: the split the records are written to.
            records: the records.
            crcs: their plain CRC-32Cs.
            slices: the records as ``tfrecord_format.record_slices`` gave them, if taken.
        """
        if records.pieces is not None:
            fps, samples = dup.batch_fingerprints(None, records.offsets, crcs, records.pieces)
        else:
            fps, samples = dup.batch_fingerprints(records.payload, records.offsets, crcs,
                                                  slices=slices)
        self._counts.add(split, fps)
        if samples:
            self._counts.add_samples(samples)

    @property
    def full(self) -> bool:
        """Whether it holds enough to hand on now rather than at the bundle's end."""
        return self._counts.pending >= _FLUSH_RECORDS

    def drain(self) -> Iterator[FingerprintShare]:
        """What it holds, one :class:`FingerprintShare` per bucket; then it is empty.

        Yields:
            One share per non-empty bucket.
        """
        counts, self._counts = self._counts, dup.FingerprintCounts()
        for bucket, part in sorted(counts.by_bucket().items()):
            yield FingerprintShare(bucket, part)


class DuplicatesCombineFn(beam.CombineFn):
    """One bucket's FingerprintCounts -> its :class:`~sinks.format.duplicates.BucketResult`,
    holding at most ``capacity`` distinct fingerprints (and as many waiting to be folded in).

    Args:
        capacity: the distinct fingerprints an accumulator keeps before it samples
            (``sinks.format.duplicates.CAPACITY``).
    """

    def __init__(self, capacity: int = dup.CAPACITY) -> None:
        self._capacity = capacity

    def create_accumulator(self) -> dup.FingerprintCounts:
        return dup.FingerprintCounts(self._capacity)

    def add_input(self, acc: dup.FingerprintCounts, part: dup.FingerprintCounts
                  ) -> dup.FingerprintCounts:
        return acc.merge(part)  # folds in once as many wait as it keeps

    def merge_accumulators(self, accs: Iterable[dup.FingerprintCounts]
                           ) -> dup.FingerprintCounts:
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first.compact()

    def compact(self, acc: dup.FingerprintCounts) -> dup.FingerprintCounts:
        return acc.compact()

    def extract_output(self, acc: dup.FingerprintCounts) -> dup.BucketResult:
        return acc.result()


class CountDuplicates(beam.PTransform):
    """A shard writer's output -> one ``BucketResult`` per bucket that holds a record (the
    commit adds them up with ``sinks.format.duplicates.summarize``); the staged files in the
    output are left out."""

    def expand(self, written: Any):
        return (written
                | "Shares" >> beam.Filter(is_share)
                | "ByBucket" >> beam.Map(_keyed)  # (bucket, FingerprintCounts)
                | "Combine" >> beam.CombinePerKey(DuplicatesCombineFn())
                | "Results" >> beam.Values())
