"""The seeded shuffle's arithmetic: record keys, hash cells, shard ranges, order and gathers.

A shuffled build orders every record by a 64-bit key computed from its own bytes and the
seed, so the order is a pseudo-random permutation that depends on nothing but the records
and the seed -- not on input order, bundles, workers or runner:

- **Key**: the record's CRC-32C (which framing computes anyway), its length and 16 of its
  bytes, through a 64-bit mixer keyed by the seed (:func:`record_keys`). Not cryptographic;
  ties (identical records, in practice) are ordered by their bytes, so even a tie is
  deterministic.
- **Cells**: the key's top 12 bits put a record in one of 4,096 cells. Writers sort each
  spill (a "run", at most :data:`RUN_BYTES`) by key and describe it by the records and bytes
  each cell holds -- a few KB, not the data.
- **Ranges**: the cells' byte totals over all runs are content-determined, so the shard
  count and each shard's key range (:func:`plan_ranges`) are too. A shard reads its range
  from every run (a contiguous slice of each, :func:`run_slice`), orders the records by key
  (:func:`record_order`) and writes them.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from beam_tfrecords.sinks.format.shard_plan import ShardSize

__all__ = ["CELLS", "KEY_SPACE", "MAX_SEED", "RUN_BYTES", "RunCells", "choose_shard_count",
           "fmix64", "gather_framed", "plan_ranges", "record_keys", "record_order", "run_cells",
           "RunIndex", "sampled_bytes_of_pieces", "seed_words", "windows"]

CELL_BITS = 12
CELLS = 1 << CELL_BITS  # hash cells per split; a shard is a run of whole or split cells
_CELL_SHIFT = np.uint64(64 - CELL_BITS)
KEY_SPACE = 1 << 64  # keys are in [0, KEY_SPACE); a shard's range is [lo, hi)
MAX_SEED = 2**63 - 1  # seeds are integers in [0, MAX_SEED]: what YAML, JSON and flags carry
# What a writer buffers before it sorts and spills a run: the largest memory the shuffle adds
# to a writer (plus about as much again while the run is sorted), and the size of a run.
RUN_BYTES = 32 * 2**20
# Bytes a gather copies at a time: bounds the index arrays numpy needs to a few times this.
_GATHER_BYTES = 4 * 2**20
_M1, _M2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SAMPLES = 16
_SAMPLE_STEPS = np.arange(_SAMPLES, dtype=np.int64)


def seed_words(seed: int) -> tuple[int, int]:
    """Two 64-bit words derived from the seed (any integer): the mixer's keys.

    Args:
        seed: the shuffle's seed.

    Returns:
        The two words, each below 2**64.
    """
    digest = hashlib.blake2b(str(int(seed)).encode(), digest_size=16,
                             person=b"btf-shuffle").digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little")


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finalizer, a bijection of uint64: every input bit flips each
    output bit with p ~ 1/2.

    Args:
        x: uint64 words.

    Returns:
        Their mixes (uint64).
    """
    x = x ^ (x >> np.uint64(33))
    x = x * _M1
    x = x ^ (x >> np.uint64(33))
    x = x * _M2
    return x ^ (x >> np.uint64(33))


def _sampled_bytes(payload: bytes | bytearray | memoryview, offsets: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Two uint64 words per record: its bytes at 16 evenly spaced positions (zeros where it
    is empty). Whole-array work, no call per record."""
    source = np.frombuffer(memoryview(payload).cast("B"), np.uint8)
    bounds = np.asarray(offsets, np.int64)
    n = bounds.size - 1
    if n == 0 or source.size == 0:
        return np.zeros(n, np.uint64), np.zeros(n, np.uint64)
    lengths = np.diff(bounds)
    positions = bounds[:-1, None] + (lengths[:, None] * _SAMPLE_STEPS) // _SAMPLES
    sampled = source[np.minimum(positions, source.size - 1)]
    sampled[lengths == 0] = 0
    words = np.ascontiguousarray(sampled).view("<u8")
    return words[:, 0].astype(np.uint64), words[:, 1].astype(np.uint64)


def sampled_bytes_of_pieces(records: Sequence[Sequence[bytes | memoryview]],
                            offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_sampled_bytes` of records given as pieces (``b"".join(records[i])`` is record
    ``i``; ``offsets`` their boundaries as if joined), without joining them: each sampled
    position is found in its piece, and each piece is read with one numpy gather.

    Args:
        records: each record as a sequence of byte pieces.
        offsets: the records' boundaries as if they were joined (length ``len(records) + 1``).

    Returns:
        Two uint64 arrays, one word each per record, of the sampled bytes :func:`record_keys` mixes.
    """
    bounds = np.asarray(offsets, np.int64)
    n = bounds.size - 1
    flat = [piece for parts in records for piece in parts]
    if n == 0 or bounds[-1] == 0:
        return np.zeros(n, np.uint64), np.zeros(n, np.uint64)
    lengths = np.diff(bounds)
    positions = (bounds[:-1, None] + (lengths[:, None] * _SAMPLE_STEPS) // _SAMPLES).ravel()
    positions = np.minimum(positions, bounds[-1] - 1)
    ends = np.cumsum([memoryview(piece).nbytes for piece in flat], dtype=np.int64)
    which = np.searchsorted(ends, positions, side="right")  # the piece holding each position
    starts = ends - [memoryview(piece).nbytes for piece in flat]
    sampled = np.empty(positions.size, np.uint8)
    order = np.argsort(which, kind="stable")
    grouped = which[order]
    cuts = np.flatnonzero(np.diff(grouped)) + 1
    for lo, hi in zip(np.concatenate(([0], cuts)).tolist(),
                      np.concatenate((cuts, [grouped.size])).tolist(), strict=True):
        k = int(grouped[lo])
        at = order[lo:hi]
        piece = np.frombuffer(memoryview(flat[k]).cast("B"), np.uint8)
        sampled[at] = piece[positions[at] - starts[k]]
    sampled = sampled.reshape(n, _SAMPLES)
    sampled[lengths == 0] = 0
    words = np.ascontiguousarray(sampled).view("<u8")
    return words[:, 0].astype(np.uint64), words[:, 1].astype(np.uint64)


def record_keys(payload: bytes | bytearray | memoryview | None, offsets: np.ndarray,
                crcs: np.ndarray, seed: int,
                sampled: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """The shuffle keys (uint64) of the records ``payload[offsets[i]:offsets[i+1]]``, whose
    plain CRC-32Cs are ``crcs`` (framing computes them anyway), keyed by ``seed``.

    A key mixes the record's CRC-32C, its length and its bytes at 16 evenly spaced
    positions: two different records share a key only if all three agree -- a CRC collision
    needs differences spread over the record, which the samples then catch, except by
    chance. (A second checksum over every byte would cost a call per record.) ``sampled``:
    those bytes when the caller has them (:func:`sampled_bytes_of_pieces`; ``payload`` is
    then not read).

    Args:
        payload: the records' bytes, back to back; unread when ``sampled`` is given.
        offsets: the records' boundaries in ``payload`` (length records + 1).
        crcs: each record's plain CRC-32C.
        seed: the shuffle's seed.
        sampled: the sampled bytes, when the caller already has them.

    Returns:
        One uint64 key per record.
    """
    a, b = (np.uint64(w) for w in seed_words(seed))
    lengths = np.diff(np.asarray(offsets, np.int64)).astype(np.uint64)
    first, second = _sampled_bytes(payload, offsets) if sampled is None else sampled
    with np.errstate(over="ignore"):
        x = fmix64(np.asarray(crcs, np.uint64) ^ a)
        x = fmix64(x ^ (lengths * _GOLDEN + b))
        x = fmix64(x ^ first)
        return fmix64(x ^ second)


def cells_of(keys: np.ndarray) -> np.ndarray:
    """The cell each key falls in: its top ``CELL_BITS`` bits, the unit the plan counts records by.

    Args:
        keys: shuffle keys (uint64).

    Returns:
        The cells (int64, below ``CELLS``).
    """
    return (np.asarray(keys, np.uint64) >> _CELL_SHIFT).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class RunCells:
    """A sorted run's census: for each non-empty cell, its records and framed bytes."""

    cells: bytes  # uint16 cell numbers, ascending
    records: bytes  # uint32 per cell
    nbytes: bytes  # uint64 per cell

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """(records, bytes) per cell over all CELLS, int64.

        Returns:
            Two int64 arrays of length ``CELLS``: records and framed bytes per cell.
        """
        cells = np.frombuffer(self.cells, np.uint16).astype(np.int64)
        records = np.zeros(CELLS, np.int64)
        sizes = np.zeros(CELLS, np.int64)
        records[cells] = np.frombuffer(self.records, np.uint32)
        sizes[cells] = np.frombuffer(self.nbytes, np.uint64)
        return records, sizes


def run_cells(sorted_keys: np.ndarray, framed_sizes: np.ndarray) -> RunCells:
    """The census of a run whose records are sorted by key, with their framed sizes.

    Args:
        sorted_keys: the run's shuffle keys, ascending.
        framed_sizes: each record's framed size in bytes, in the same order.

    Returns:
        The run's records and bytes per present cell.
    """
    cells = cells_of(sorted_keys)
    present, first = np.unique(cells, return_index=True)
    counts = np.diff(np.append(first, len(cells)))
    totals = np.add.reduceat(np.asarray(framed_sizes, np.int64), first) if len(first) else (
        np.zeros(0, np.int64))
    return RunCells(present.astype(np.uint16).tobytes(), counts.astype(np.uint32).tobytes(),
                    np.asarray(totals, np.uint64).tobytes())


def choose_shard_count(stored_estimate: float, size: ShardSize) -> int:
    """How many shards a split of ``stored_estimate`` bytes gets: equal shares nearest the
    target that lie in the band; one shard when the split is not above ``max``.

    Args:
        stored_estimate: the split's estimated bytes on disk (after compression).
        size: the shard size band (target, min, max).

    Returns:
        The number of shards, at least 1.
    """
    if stored_estimate <= size.max:
        return 1
    low = max(1, int(stored_estimate // size.target))
    candidates = [n for n in (low, low + 1) if size.min <= stored_estimate / n <= size.max]
    if not candidates:  # cannot happen while max >= 2 * min; stay on the safe side
        return max(1, -(-int(stored_estimate) // size.max))
    return min(candidates, key=lambda n: abs(stored_estimate / n - size.target))


def plan_ranges(cell_bytes: np.ndarray, ratio: float, size: ShardSize
                ) -> list[tuple[int, int]]:
    """Key ranges ``[lo, hi)`` of one split's shards, in order, covering the key space.

    ``cell_bytes`` are the framed bytes per cell summed over all runs; ``ratio`` is stored
    bytes per framed byte (1 uncompressed). Each of the N shards (:func:`choose_shard_count`)
    ends where the running total passes its share: at a cell boundary when cells are small
    against a shard (32 or more cells each), else inside the cell, at the key the share
    falls on if the cell's bytes were spread evenly over its keys -- shards then read a cell
    they share with a neighbour, and their sizes vary by the records' randomness only.

    Args:
        cell_bytes: framed bytes per cell over all runs (length ``CELLS``).
        ratio: stored bytes per framed byte.
        size: the shard size band.

    Returns:
        ``(lo, hi)`` per shard.
    """
    cell_bytes = np.asarray(cell_bytes, np.float64)
    total = float(cell_bytes.sum())
    n = choose_shard_count(total * ratio, size)
    if n == 1:
        return [(0, KEY_SPACE)]
    cumulative = np.concatenate(([0.0], np.cumsum(cell_bytes)))
    shares = total * np.arange(1, n) / n
    width = KEY_SPACE // CELLS
    if CELLS // n >= 32:
        nearest = np.searchsorted(cumulative, shares)  # first boundary at or past the share
        before = np.maximum(nearest - 1, 0)
        pick = np.where(shares - cumulative[before] < cumulative[nearest] - shares,
                        before, nearest)
        cuts = [int(c) * width for c in pick]
    else:
        cuts = []
        for share in shares:
            cell = int(np.searchsorted(cumulative, share, side="right")) - 1
            cell = min(cell, CELLS - 1)
            inside = cell_bytes[cell]
            fraction = (share - cumulative[cell]) / inside if inside else 0.0
            cuts.append(cell * width + int(fraction * width))
    bounds = [0, *sorted(cuts), KEY_SPACE]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:]) if hi > lo] or [(0, KEY_SPACE)]


def windows(cell_bytes: np.ndarray, lo: int, hi: int, window_bytes: int
            ) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut at cell boundaries into key ranges of about ``window_bytes`` framed
    bytes each (``cell_bytes``: the shard's runs' bytes per cell): the pieces a shard is
    ordered and written in, so that it is never in memory whole. A range's records all sort
    before the next range's, so writing them one after another writes the shard in order.

    Args:
        cell_bytes: the shard's framed bytes per cell (length ``CELLS``).
        lo: the shard's first key.
        hi: the key after its last.
        window_bytes: the framed bytes a window aims at.

    Returns:
        ``(lo, hi)`` per window, in key order.
    """
    width = KEY_SPACE // CELLS
    first, last = lo // width, (hi - 1) // width
    cuts, held = [], 0
    for cell in range(first, last + 1):
        held += int(cell_bytes[cell])
        if held >= window_bytes and cell < last:
            cuts.append((cell + 1) * width)
            held = 0
    bounds = [lo, *cuts, hi]
    return list(zip(bounds, bounds[1:]))


class RunIndex:
    """Where each cell starts in each of a split's sorted runs: two (runs, CELLS + 1) tables of
    record and byte offsets, built once by the plan, so that a key range's slice of every run
    is two column lookups (:meth:`slices`).

    Args:
        censuses: each run's census, in run order.
    """

    def __init__(self, censuses: Sequence[RunCells]) -> None:
        self.records = np.zeros((len(censuses), CELLS + 1), np.int64)
        self.bytes = np.zeros((len(censuses), CELLS + 1), np.int64)
        for row, census in enumerate(censuses):
            records, sizes = census.dense()
            np.cumsum(records, out=self.records[row, 1:])
            np.cumsum(sizes, out=self.bytes[row, 1:])

    def cell_bytes(self) -> np.ndarray:
        """Framed bytes per cell over all the runs.

        Returns:
            An int64 array of length ``CELLS``.
        """
        return np.diff(self.bytes, axis=1).sum(axis=0)

    def slices(self, lo: int, hi: int) -> np.ndarray:
        """(runs, 4) int64: first record, end record, first byte and end byte of the whole
        cells of each run that hold keys in ``[lo, hi)`` -- what a shard reads of it (then
        filters by key at the edges).

        Args:
            lo: the range's first key.
            hi: the key after its last.

        Returns:
            The (runs, 4) table.
        """
        first, end = lo >> (64 - CELL_BITS), ((hi - 1) >> (64 - CELL_BITS)) + 1
        return np.stack([self.records[:, first], self.records[:, end], self.bytes[:, first],
                         self.bytes[:, end]], axis=1)


def record_order(keys: np.ndarray,
                 record_at: Callable[[int], bytes | memoryview] | None = None) -> np.ndarray:
    """The order of records by key; records of equal keys by their bytes (``record_at(i)``
    gives record ``i``'s bytes; without it ties keep their input order).

    Args:
        keys: the records' shuffle keys (uint64).
        record_at: returns record ``i``'s bytes, to break ties; None keeps tied records in input
            order.

    Returns:
        Record indices (int64) in output order.
    """
    keys = np.asarray(keys, np.uint64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    ties = np.flatnonzero(ordered[1:] == ordered[:-1])
    if ties.size and record_at is not None:
        start = 0
        while start < ties.size:  # each run of equal keys, sorted by the records' bytes
            end = start
            while end + 1 < ties.size and ties[end + 1] == ties[end] + 1:
                end += 1
            a, b = int(ties[start]), int(ties[end]) + 2
            order[a:b] = sorted(order[a:b].tolist(), key=lambda i: bytes(record_at(i)))
            start = end + 1
    return order


def gather_framed(buffer: bytes | bytearray | memoryview, starts: np.ndarray,
                  sizes: np.ndarray, order: np.ndarray, chunk_bytes: int = _GATHER_BYTES
                  ) -> Iterator[tuple[memoryview, np.ndarray]]:
    """The byte ranges ``buffer[starts[i]:starts[i] + sizes[i]]`` for ``i`` in ``order``,
    concatenated, as chunks of about ``chunk_bytes`` -- each with the sizes it holds.

    The ranges must tile ``buffer`` (``starts`` is the running sum of ``sizes``): they are
    then an Arrow binary array over it, uncopied, and each chunk is one Arrow ``take`` (a
    memcpy per record in C++; twice as fast as a numpy byte gather and without its index
    arrays). Large records are yielded one by one as views, not copied at all.

    Args:
        buffer: the framed records, back to back.
        starts: each record's start in ``buffer``.
        sizes: each record's framed size.
        order: record indices in the order to write them.
        chunk_bytes: about how many bytes a chunk holds.

    Yields:
        ``(chunk, sizes)``: the chunk's bytes and the framed size of each record in it.
    """
    view = memoryview(buffer).cast("B")
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(sizes, np.int64)
    order = np.asarray(order, np.int64)
    n = len(order)
    if n == 0:
        return
    ordered = sizes[order]
    if int(ordered.sum()) >= 32 * 1024 * n:  # images and tensors: views, no copies
        for start, size in zip(starts[order].tolist(), ordered.tolist(), strict=True):
            yield view[start:start + size], np.array([size], np.int64)
        return
    bounds = np.append(starts, starts[-1] + sizes[-1]) if len(starts) else np.zeros(1, np.int64)
    if bounds[0] != 0 or bounds[-1] != len(view) or np.any(starts[1:] != bounds[1:-1]):
        raise ValueError("gather_framed needs ranges that tile the buffer")
    records = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(sizes), [None, pa.py_buffer(bounds), pa.py_buffer(view)])
    ends = np.cumsum(ordered)
    i = 0
    while i < n:
        base = int(ends[i - 1]) if i else 0
        j = max(int(np.searchsorted(ends, base + chunk_bytes, side="right")), i + 1)
        taken = records.take(pa.array(order[i:j]))
        offsets = np.frombuffer(taken.buffers()[1], np.int64, j - i + 1, taken.offset * 8)
        yield memoryview(taken.buffers()[2])[offsets[0]:offsets[-1]], ordered[i:j]
        i = j
