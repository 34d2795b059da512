"""Beam coders for the fast path's batch elements, whose size Beam can learn without encoding.

Beam samples the size of the elements of every PCollection for its metrics (each of the
first 10, then ~7 per doubling of the count) by encoding them. A type Beam has no coder for
is encoded with pickle, so each sample pickled a whole chunk -- 64k rows of a RecordBatch, or
25 MB of image bytes -- only to count its bytes and throw it away (a noticeable share of an
image build, bench/README.md). These coders still pickle an element that really crosses a step
boundary, but estimate its size from the byte counts it already holds.

The reader and encoder steps declare their main outputs' types (``RecordChunk``,
``tuple[str, SerializedBatch]``), which is how Beam picks these coders from its registry.
"""

from __future__ import annotations

import pickle
from typing import Any

import apache_beam as beam

from beam_tfrecords.runtime.serialized_batch import SerializedBatch

__all__ = ["SerializedBatchCoder", "SizedPickleCoder", "rows_nbytes"]


class SizedPickleCoder(beam.coders.Coder):
    """Pickle for the data; :meth:`nbytes` (the subclass's, cheap) for size estimates."""

    value_type: type = object

    def encode(self, value: Any) -> bytes:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> Any:
        return pickle.loads(encoded)

    def is_deterministic(self) -> bool:
        return False

    def estimate_size(self, value: Any) -> int:
        return self.nbytes(value) if isinstance(value, self.value_type) else len(
            self.encode(value))

    def nbytes(self, value: Any) -> int:
        """The value's size in memory, which Beam's size estimates use instead of pickling it; each
        subclass defines it.

        Args:
            value: an element of the coder's type.

        Returns:
            Bytes.
        """
        raise NotImplementedError

    def to_type_hint(self) -> type:
        return self.value_type

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


def rows_nbytes(rows: list) -> int:
    """About how many bytes a list of record mappings holds: its strings, bytes and numbers.

    Args:
        rows: record mappings.

    Returns:
        Their strings' and bytes' lengths, plus 8 per other value.
    """
    total = 0
    for row in rows:
        for value in row.values():
            total += len(value) if isinstance(value, (bytes, str)) else 8
    return total


class SerializedBatchCoder(SizedPickleCoder):
    value_type = SerializedBatch

    def nbytes(self, value: SerializedBatch) -> int:
        """The batch's payload and offsets, in bytes.

        Args:
            value: the batch.

        Returns:
            Bytes.
        """
        return value.nbytes + value.offsets.nbytes


beam.coders.registry.register_coder(SerializedBatch, SerializedBatchCoder)
