"""``CountDuplicates``: duplicate records per split and records in several splits, on any runner.

The shard writers fingerprint every record they write (sinks/format/duplicates.py: two CRCs
of different polynomials and the length; the CRC-32C is the one framing computes anyway) and
hand each bundle's fingerprints on, cut by bucket, as ``(bucket, FingerprintCounts)``
elements (:class:`FingerprintTally`). :class:`DuplicatesCombineFn` merges them per bucket --
a Beam ``CombineFn``, so every runner counts, each worker holding the buckets it combines --
and the commit adds the buckets' results up into the manifest's ``duplicates``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np

from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format import duplicates as dup

__all__ = ["DUPLICATES", "CountDuplicates", "DuplicatesCombineFn", "FingerprintTally"]

# The writers' tagged output carrying (bucket, FingerprintCounts).
DUPLICATES = "duplicates"
# Fingerprints a writer holds before it hands them on (8 bytes each, plus their counts).
_FLUSH_RECORDS = 1 << 20


class FingerprintTally:
    """A writer's fingerprints of the records it wrote since it last handed them on."""

    def __init__(self) -> None:
        self._counts = dup.FingerprintCounts()

    def note(self, split: str, records: SerializedBatch, crcs: np.ndarray) -> None:
        """Fingerprint a batch of ``split`` whose plain CRC-32Cs are ``crcs``.

        Args:
            split: the split the records are written to.
            records: the records.
            crcs: their plain CRC-32Cs.
        """
        if records.pieces is not None:
            fps, samples = dup.batch_fingerprints(None, records.offsets, crcs, records.pieces)
        else:
            fps, samples = dup.batch_fingerprints(records.payload, records.offsets, crcs)
        self._counts.add(split, fps)
        if samples:
            self._counts.add_samples(samples)

    @property
    def full(self) -> bool:
        """Whether it holds enough to hand on now rather than at the bundle's end."""
        return self._counts.pending >= _FLUSH_RECORDS

    def drain(self) -> Iterator[Any]:
        """Tagged ``(bucket, FingerprintCounts)`` outputs of what it holds; then it is empty.

        Yields:
            One tagged output per non-empty bucket.
        """
        counts, self._counts = self._counts, dup.FingerprintCounts()
        for bucket, part in sorted(counts.by_bucket().items()):
            yield beam.pvalue.TaggedOutput(DUPLICATES, (bucket, part))


class DuplicatesCombineFn(beam.CombineFn):
    """One bucket's FingerprintCounts -> its :class:`~sinks.format.duplicates.BucketResult`."""

    def create_accumulator(self) -> dup.FingerprintCounts:
        return dup.FingerprintCounts()

    def add_input(self, acc: dup.FingerprintCounts, part: dup.FingerprintCounts
                  ) -> dup.FingerprintCounts:
        acc.merge(part)
        return acc.compact() if acc.pending >= _FLUSH_RECORDS else acc

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
    """``(bucket, FingerprintCounts)`` -> one ``BucketResult`` per bucket that holds a record
    (the commit adds them up with ``sinks.format.duplicates.summarize``)."""

    def expand(self, parts: Any):
        return (parts
                | "Combine" >> beam.CombinePerKey(DuplicatesCombineFn())
                | "Results" >> beam.Values())
