"""The element type of the fast path: many serialized records in one buffer plus offsets.

Beam costs 10-14 microseconds per element per step, more than encoding a small Example, so
records travel between steps in batches: one ``bytes`` payload and an int64 offsets array of
``n + 1`` boundaries. A batch pickles as two buffers, frames with one call
(:func:`tfrecord_format.frame_batch`) and is written with one ``write``.

Large records (images) are the exception: joining them into one payload would copy every
image once more, for nothing the sink needs, so a batch of large records made from pieces
keeps them (:attr:`SerializedBatch.pieces`) and joins only when something asks for the
payload (pickling, the shuffle). The sink frames and writes the pieces as they are.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

__all__ = ["SerializedBatch"]


# Mean record size from which a batch made of pieces keeps them unjoined (the sinks write
# records this large piece by piece anyway).
LARGE_RECORD_BYTES = 32 * 1024


class SerializedBatch:
    """``n`` serialized records: ``payload[offsets[i]:offsets[i + 1]]`` is record ``i``.

    Args:
        payload: the records' bytes, back to back.
        offsets: int64 boundaries, from 0 to ``len(payload)`` (length records + 1).

    Raises:
        ValueError: the offsets do not run from 0 to the payload's end.
    """

    __slots__ = ("_payload", "offsets", "pieces")

    def __init__(self, payload: bytes, offsets: np.ndarray) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or (
            offsets[-1] != len(payload)
        ):
            raise ValueError("offsets must run from 0 to len(payload)")
        self._payload = bytes(payload)
        self.offsets = offsets
        # Record i as buffers, when the batch was made of them and not joined yet; else None.
        self.pieces: list[Sequence[bytes | memoryview]] | None = None

    @property
    def payload(self) -> bytes:
        """All records, concatenated (joined now if the batch still holds pieces)."""
        if self._payload is None:
            self._payload = b"".join(itertools.chain.from_iterable(self.pieces))
            self.pieces = None
        return self._payload

    @classmethod
    def from_records(cls, records: Sequence[bytes]) -> SerializedBatch:
        """A batch of the given records, joined.

        Args:
            records: serialized records.

        Returns:
            The batch.
        """
        offsets = np.zeros(len(records) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in records], out=offsets[1:])
        return cls(b"".join(records), offsets)

    @classmethod
    def from_pieces(cls, records: Sequence[Sequence[bytes | memoryview]], sizes: Sequence[int]
                    ) -> SerializedBatch:
        """Records given as pieces (``b"".join(records[i])`` is record ``i``, of ``sizes[i]``
        bytes). Small records are joined in one pass, each piece copied once, straight into
        the payload; large ones (a mean of :data:`LARGE_RECORD_BYTES` or more) stay pieces.

        Args:
            records: each record as byte pieces.
            sizes: each record's size in bytes.

        Returns:
            The batch.

        Raises:
            ValueError: the sizes do not match the pieces.
        """
        offsets = np.zeros(len(records) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] < LARGE_RECORD_BYTES * len(records):
            return cls(b"".join(itertools.chain.from_iterable(records)), offsets)
        if [sum(map(len, pieces)) for pieces in records] != list(map(int, sizes)):
            raise ValueError("offsets must run from 0 to len(payload): the sizes do not match "
                             "the records' pieces")
        batch = cls.__new__(cls)
        batch._payload, batch.offsets, batch.pieces = None, offsets, list(records)
        return batch

    def __len__(self) -> int:
        return self.offsets.size - 1

    @property
    def nbytes(self) -> int:
        return int(self.offsets[-1])

    def __iter__(self) -> Iterator[bytes]:
        payload, bounds = self.payload, self.offsets.tolist()
        for start, stop in zip(bounds, bounds[1:]):
            yield payload[start:stop]

    def __getitem__(self, index: int) -> bytes:
        if self.pieces is not None:
            return b"".join(self.pieces[index])
        return self.payload[self.offsets[index]:self.offsets[index + 1]]

    def __reduce__(self):
        return (SerializedBatch, (self.payload, self.offsets))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SerializedBatch) and self.payload == other.payload
                and np.array_equal(self.offsets, other.offsets))

    def __repr__(self) -> str:
        return f"SerializedBatch({len(self)} records, {self.nbytes} bytes)"
