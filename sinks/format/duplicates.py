"""Duplicate records per split and records in more than one split, counted by fingerprint.

Every record written gets a 64-bit fingerprint (:func:`fingerprints`) from two CRCs of
different polynomials over its serialized bytes -- the CRC-32C that framing computes anyway
and zlib's CRC-32 -- and its length. Two records of one length with the same fingerprint
have the same pair of CRCs (the final mix is a bijection), so their XOR, read as a polynomial
over GF(2), is divisible by both generator polynomials (CRC-32's is irreducible, CRC-32C's is
(x + 1) times an irreducible of degree 31: coprime), hence by their product, of degree 64:

* two records of one length that differ only within 8 consecutive bytes never collide;
* otherwise, for data not built to collide, a pair collides with probability about 2^-64
  (records of different lengths: the mix of a length difference into a 64-bit word, the
  same); with N distinct records about N^2 / 2^65 false duplicates are expected: 0.03 at
  10^9 records, 3 * 10^-8 at 10^6. A collision can only make two different records count as
  one (a duplicate, or a leak), never hide a real one.

A writer hands each split's fingerprints of a bundle on cut into :data:`BUCKETS` buckets by
their low bits; one accumulator per bucket (:class:`FingerprintCounts`) holds, per split, its
exact number of records and its distinct fingerprints (sorted) with how often each was written,
and merges with others in any grouping and order. Memory is bounded: an accumulator keeps at
most :data:`CAPACITY` distinct fingerprints (8 bytes each, and a count for those written more
than once). Past that it keeps only the fingerprints below ``2**(64 - level)``, raising its
level one step at a time until they fit -- a sample of the distinct records, every copy of a
record alike (the fingerprint decides, not the bundle), of fraction ``2**-level``. The level a
bucket ends at is the smallest at which the bucket's distinct fingerprints fit, whatever the
bundles and the merge order (a part never needs a higher level than the whole), so the counts
are the same on every runner. At level 0 they are exact; above it the duplicates, leaked
records and records in several splits are the sample's scaled by ``2**level``, with their
standard errors (:class:`BucketResult`). :func:`summarize` adds the buckets up.

Examples: the fingerprints that are duplicated or in several splits, smallest first (a choice
fixed by the data, not by bundles or runners; the sample keeps the smallest fingerprints, so
it never loses them). The bytes of a record are kept (its first :data:`SAMPLE_BYTES`) when
its fingerprint is below :data:`SAMPLE_BELOW` (one distinct record in 4,096), every copy
alike; an accumulator keeps at most :data:`SAMPLES_KEPT` of them, lowering that bound the same
way, so a duplicated record that was sampled is among the smallest.

Pure: numpy and the standard library; no Beam, no I/O.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.shuffle_plan import fmix64

__all__ = ["BUCKETS", "BYTES_METHOD", "CAPACITY", "EXAMPLES_KEPT", "SAMPLES_KEPT",
           "SAMPLE_BELOW", "SAMPLE_BYTES", "BucketResult", "Example", "FingerprintCounts",
           "SplitCounts", "batch_fingerprints", "buckets_of", "fingerprints", "key_counts",
           "key_method", "sampled", "summarize"]

BUCKET_BITS = 5
BUCKETS = 1 << BUCKET_BITS  # accumulators per build: each holds a 1/BUCKETS share
_BUCKET_MASK = np.uint64(BUCKETS - 1)
# Distinct fingerprints an accumulator keeps (per bucket: 1 MB of fingerprints, 2 MB with as
# many waiting to be folded in):
# a build's counts are exact up to about BUCKETS * CAPACITY = 4.2M distinct records (summed
# over splits), a sample's above that.
CAPACITY = 1 << 17
EXAMPLES_KEPT = 5  # examples per bucket, and in the summary
_SAMPLE_BITS = 52
SAMPLE_BELOW = 1 << _SAMPLE_BITS  # these keep their record's first bytes: 1 in 4,096
SAMPLE_BYTES = 2048
SAMPLES_KEPT = 64  # sampled records' bytes an accumulator keeps (128 KB at most)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# The manifest's ``duplicates.method``: records compared by their serialized bytes, or by the
# value of a configured key (:func:`key_method`).
BYTES_METHOD = "fingerprint64"


def key_method(key: Sequence[str]) -> str:
    """The ``duplicates.method`` of a count by the value of ``key`` (a field path).

    Args:
        key: the field's path.

    Returns:
        ``key:<dotted path>``.
    """
    return "key:" + ".".join(key)


def fingerprints(crc32c: np.ndarray, crc32: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Each record's 64-bit fingerprint from its plain CRC-32C, its zlib CRC-32 and its length.

    Args:
        crc32c: the records' plain CRC-32Cs (what framing computes).
        crc32: the records' CRC-32s (``zlib.crc32``).
        lengths: the records' sizes in bytes.

    Returns:
        One uint64 per record.
    """
    word = (np.asarray(crc32c, np.uint64) << np.uint64(32)) | np.asarray(crc32, np.uint64)
    with np.errstate(over="ignore"):
        return fmix64(word ^ (np.asarray(lengths, np.uint64) * _GOLDEN))


def buckets_of(fps: np.ndarray) -> np.ndarray:
    """The bucket of each fingerprint: its low :data:`BUCKET_BITS` bits (the sample keeps
    the smallest fingerprints, so the buckets must not be cut by the top bits).

    Args:
        fps: fingerprints (uint64).

    Returns:
        Their buckets (int64, below :data:`BUCKETS`).
    """
    return (np.asarray(fps, np.uint64) & _BUCKET_MASK).astype(np.int64)


def sampled(fps: np.ndarray) -> np.ndarray:
    """The indices of the fingerprints whose records' bytes are kept as examples.

    Args:
        fps: fingerprints (uint64).

    Returns:
        Indices into ``fps`` (int64).
    """
    return np.flatnonzero(np.asarray(fps, np.uint64) < np.uint64(SAMPLE_BELOW))


def _below(fps: np.ndarray, bits: int) -> np.ndarray:
    """The mask of the fingerprints below ``2**bits`` (all of them at 64 bits)."""
    if bits >= 64:
        return np.ones(fps.size, bool)
    return fps < np.uint64(1 << bits)


@dataclasses.dataclass(frozen=True)
class SplitCounts:
    """One split's records, distinct records, duplicates (records - distinct) and leaked
    records (its records whose fingerprint is also in another split, every copy counted),
    with the standard errors of the duplicates and leaked records when they were estimated
    from a sample (their variances add up over buckets, so they are kept squared)."""

    records: int = 0
    distinct: int = 0
    leaked: int = 0
    duplicates_variance: float = 0.0
    leaked_variance: float = 0.0

    @property
    def duplicates(self) -> int:
        return self.records - self.distinct

    def __add__(self, other: SplitCounts) -> SplitCounts:
        return SplitCounts(self.records + other.records, self.distinct + other.distinct,
                           self.leaked + other.leaked,
                           self.duplicates_variance + other.duplicates_variance,
                           self.leaked_variance + other.leaked_variance)


@dataclasses.dataclass(frozen=True)
class Example:
    """A record written more than once: its fingerprint, copies per split and, when it was
    sampled, ``(its size, its first bytes)``."""

    fingerprint: int
    copies: Mapping[str, int]
    sample: tuple[int, bytes] | None = None


@dataclasses.dataclass(frozen=True)
class BucketResult:
    """What one bucket holds: counts per split, distinct records in several splits, its
    smallest examples, and its sampling level (0: exact; else the counts are estimated from
    the fingerprints below ``2**(64 - level)``)."""

    splits: Mapping[str, SplitCounts]
    several: int = 0
    examples: tuple[Example, ...] = ()
    level: int = 0


def _fold(fps: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Fingerprints with counts (repeats allowed, any order) -> distinct, sorted, counts summed.
    A stable sort is a merge of runs: cheap on the sorted arrays merged here."""
    order = np.argsort(fps, kind="stable")
    fps, counts = fps[order], counts[order]
    if not fps.size:
        return fps, None
    starts = np.flatnonzero(np.concatenate(([True], fps[1:] != fps[:-1])))
    counts = np.add.reduceat(counts, starts)
    return fps[starts], None if (counts == 1).all() else counts


def _fold_raw(fps: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Fingerprints of one record each, any order -> distinct, sorted, and their counts, None
    when each came once (a sort of the values: cheaper than sorting an index)."""
    ordered = np.sort(fps)
    if not ordered.size:
        return ordered, None
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    if starts.size == ordered.size:
        return ordered, None
    return ordered[starts], np.diff(np.append(starts, ordered.size)).astype(np.int64)


def _ones(fps: np.ndarray, counts: np.ndarray | None) -> np.ndarray:
    return np.ones(fps.size, np.int64) if counts is None else counts


def _sparse(counts: np.ndarray | None) -> Any:
    """A counts array as ``(positions, counts)`` of its entries other than 1, when that is
    smaller (None stays None)."""
    if counts is None:
        return None
    other = np.flatnonzero(counts != 1)
    if other.size * 3 >= counts.size:  # 12 bytes an entry against 8: dense is smaller
        return counts
    return other.astype(np.uint32 if counts.size < 1 << 32 else np.int64), counts[other]


def _dense(fps: np.ndarray, counts: Any) -> np.ndarray | None:
    """:func:`_sparse`'s inverse, for the fingerprints ``fps`` the counts are of."""
    if not isinstance(counts, tuple):
        return counts
    positions, values = counts
    dense = np.ones(fps.size, np.int64)
    dense[positions] = values
    return dense


class FingerprintCounts:
    """Mergeable per-split counts of fingerprints (one bucket's, or one bundle's), in bounded
    memory.

    Holds per split the exact number of records added (``records``) and the distinct
    fingerprints kept (sorted uint64) with how often each was added (int64; None when each
    was added once, so that a bucket of distinct records takes 8 bytes a record): those below
    ``2**(64 - level)``, at most :data:`CAPACITY` in all once compacted. Fingerprints added
    since the last :meth:`compact` wait unsorted (with their counts, or None for one each).
    ``samples`` maps a sampled fingerprint to ``(record size, first bytes)``: those below
    ``SAMPLE_BELOW >> sample_level``, at most :data:`SAMPLES_KEPT`.

    Args:
        capacity: the distinct fingerprints kept (:data:`CAPACITY`; smaller in tests).
        samples_kept: the sampled records' bytes kept (:data:`SAMPLES_KEPT`).
    """

    def __init__(self, capacity: int = CAPACITY, samples_kept: int = SAMPLES_KEPT) -> None:
        self.capacity = capacity
        self.samples_kept = samples_kept
        self.level = 0
        self.sample_level = 0
        self.records: dict[str, int] = {}
        self.splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._pending: dict[str, list[tuple[np.ndarray, np.ndarray | None]]] = {}
        self.pending = 0  # fingerprints added and not folded yet
        self.samples: dict[int, tuple[int, bytes]] = {}

    def __getstate__(self) -> dict[str, Any]:
        # What crosses between workers: each counts array as its entries other than 1
        # (records written more than once are few), so a bucket of mostly distinct records
        # travels in about 8 bytes a record rather than 16.
        state = dict(self.__dict__)
        state["splits"] = {split: (fps, _sparse(counts))
                           for split, (fps, counts) in self.splits.items()}
        state["_pending"] = {split: [(fps, _sparse(counts)) for fps, counts in added]
                             for split, added in self._pending.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.splits = {split: (fps, _dense(fps, counts))
                       for split, (fps, counts) in self.splits.items()}
        self._pending = {split: [(fps, _dense(fps, counts)) for fps, counts in added]
                         for split, added in self._pending.items()}

    def _keep(self, split: str, fps: np.ndarray, counts: np.ndarray | None) -> None:
        if self.level:
            mask = _below(fps, 64 - self.level)
            fps = fps[mask]
            counts = None if counts is None else counts[mask]
        if fps.size:
            self._pending.setdefault(split, []).append((fps, counts))
            self.pending += fps.size

    def add(self, split: str, fps: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Count ``fps`` (one per record, or with ``counts``) in ``split``.

        Args:
            split: the split's name.
            fps: fingerprints (uint64).
            counts: how many records each stands for; None: one each.
        """
        fps = np.asarray(fps, np.uint64)
        counts = None if counts is None else np.asarray(counts, np.int64)
        self.records[split] = self.records.get(split, 0) + (
            fps.size if counts is None else int(counts.sum()))
        self._keep(split, fps, counts)

    def add_samples(self, samples: Mapping[int, tuple[int, bytes]]) -> None:
        """Keep sampled records' bytes (the first kept when a fingerprint comes twice).

        Args:
            samples: fingerprint to ``(record size, first bytes)``.
        """
        for fp, sample in samples.items():
            self.samples.setdefault(int(fp), sample)
        self._trim_samples()

    def _sample_bits(self) -> int:
        # at most the kept fingerprints' bound, so every sample is of a kept fingerprint
        return min(_SAMPLE_BITS - self.sample_level, 64 - self.level)

    def _trim_samples(self) -> None:
        """Keep the samples below the bound, raising ``sample_level`` until at most
        ``samples_kept`` are (never past the kept fingerprints' bound)."""
        self.sample_level = max(self.sample_level, self.level - (64 - _SAMPLE_BITS))
        ordered = sorted(self.samples)
        while True:
            kept = bisect.bisect_left(ordered, 1 << self._sample_bits())
            if kept <= self.samples_kept:
                break
            self.sample_level += 1
        if kept < len(ordered):
            self.samples = {fp: self.samples[fp] for fp in ordered[:kept]}

    def compact(self) -> FingerprintCounts:
        """Fold what was added into the sorted distinct fingerprints, and keep at most
        ``capacity`` of them (raising the level); returns self.

        Returns:
            This accumulator.
        """
        for split, added in self._pending.items():
            if split in self.splits:
                added = [*added, self.splits[split]]
            raw = [f for f, c in added if c is None]  # one record each
            counted = [(f, c) for f, c in added if c is not None]
            if raw:
                raw_part = _fold_raw(np.concatenate(raw))
                if not counted:
                    self.splits[split] = raw_part
                    continue
                counted.append((raw_part[0], _ones(*raw_part)))
            self.splits[split] = _fold(np.concatenate([f for f, _ in counted]),
                                       np.concatenate([c for _, c in counted]))
        self._pending = {}
        self.pending = 0
        level = self.level  # merges may have raised it: trim to it in any case
        while sum(self._kept(fps, 64 - level) for fps, _ in self.splits.values()) > (
                self.capacity):
            level += 1
        self.level = level
        for split, (fps, counts) in self.splits.items():
            kept = self._kept(fps, 64 - level)
            if kept < fps.size:
                self.splits[split] = (fps[:kept], None if counts is None else counts[:kept])
        self._trim_samples()
        return self

    @staticmethod
    def _kept(fps: np.ndarray, bits: int) -> int:
        """How many of the sorted ``fps`` are below ``2**bits``."""
        return fps.size if bits >= 64 else int(np.searchsorted(fps, np.uint64(1 << bits)))

    def merge(self, other: FingerprintCounts) -> FingerprintCounts:
        """Add another accumulator's counts and samples; returns self.

        Args:
            other: the accumulator to add (left unchanged).

        Returns:
            This accumulator.
        """
        for split, records in other.records.items():
            self.records[split] = self.records.get(split, 0) + records
        if other.level > self.level:
            self.level = other.level  # what was kept above the new bound goes at compact
        for split, (fps, counts) in other.splits.items():
            self._keep(split, fps, counts)
        for split, added in other._pending.items():
            for fps, counts in added:
                self._keep(split, fps, counts)
        self.sample_level = max(self.sample_level, other.sample_level)
        self.add_samples(other.samples)
        if self.pending >= self.capacity:  # a raised level trims what is kept then
            self.compact()
        return self

    def by_bucket(self) -> dict[int, FingerprintCounts]:
        """This accumulator cut by bucket (:func:`buckets_of`): what a writer hands on, a
        small element per non-empty bucket. What waits unsorted stays so (cut by a radix
        sort of the bucket numbers), to be sorted once where the bucket is combined; each
        share carries its split's record count for its own fingerprints.

        Returns:
            Bucket number to its share.
        """
        out: dict[int, FingerprintCounts] = {}

        def part(bucket: int) -> FingerprintCounts:
            if bucket not in out:
                share = out[bucket] = FingerprintCounts(self.capacity, self.samples_kept)
                share.level, share.sample_level = self.level, self.sample_level
            return out[bucket]

        added = [(split, fps, counts) for split, (fps, counts) in self.splits.items()]
        added += [(split, fps, counts) for split, parts in self._pending.items()
                  for fps, counts in parts]
        for split, fps, counts in added:
            buckets = buckets_of(fps).astype(np.uint8)
            order = np.argsort(buckets, kind="stable")  # a radix sort of 8-bit keys
            bounds = np.concatenate(([0], np.cumsum(np.bincount(buckets, minlength=BUCKETS))))
            fps = fps[order]
            counts = None if counts is None else counts[order]
            for bucket in np.flatnonzero(np.diff(bounds)).tolist():
                a, b = int(bounds[bucket]), int(bounds[bucket + 1])
                part(bucket).add(split, fps[a:b], None if counts is None else counts[a:b])
        # a split's records above the kept bound are counted, not kept: the bucket of the
        # smallest number holds them, so the shares' counts add up to this one's
        for split, records in self.records.items():
            held = sum(share.records.get(split, 0) for share in out.values())
            if records > held:
                share = part(0)
                share.records[split] = share.records.get(split, 0) + records - held
        for fp, sample in self.samples.items():
            part(int(fp) & (BUCKETS - 1)).samples[fp] = sample
        return out

    def result(self, kept: int = EXAMPLES_KEPT) -> BucketResult:
        """The counts this accumulator holds, and its ``kept`` smallest examples.

        At level 0 the counts are exact; above it, the sample's duplicates, leaked records
        and records in several splits are scaled by ``2**level`` (Horvitz-Thompson: each
        distinct record was kept with probability ``p = 2**-level``, all its copies alike),
        with the variance of each estimate, ``(1 - p) / p**2`` times the sum over the kept
        records of their squared contribution.

        Args:
            kept: how many examples to keep.

        Returns:
            Its :class:`BucketResult`.
        """
        self.compact()
        names = sorted(set(self.splits) | set(self.records))
        if not names:
            return BucketResult({}, level=self.level)
        empty = (np.zeros(0, np.uint64), np.zeros(0, np.int64))
        arrays = [self.splits.get(s, empty) for s in names]
        every = np.concatenate([fps for fps, _ in arrays])
        arrays = [(fps, _ones(fps, counts)) for fps, counts in arrays]
        copies = np.concatenate([counts for _, counts in arrays])
        order = np.argsort(every, kind="stable")  # a merge of the splits' sorted runs
        ordered = every[order]
        new = np.empty(ordered.size, bool)
        new[:1] = True
        np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
        inverse = np.empty(ordered.size, np.int64)
        inverse[order] = np.cumsum(new) - 1
        distinct = ordered[new]
        holders = np.bincount(inverse, minlength=distinct.size)
        in_several = holders[inverse] > 1
        scale = 1 << self.level
        spread = (scale - 1) * scale  # (1 - p) / p**2
        splits, at = {}, 0
        for name, (fps, counts) in zip(names, arrays):
            end = at + fps.size
            leaked = counts[in_several[at:end]]
            extra = counts - 1  # each kept record's duplicates within the split
            duplicates = min(int(extra.sum()) * scale, self.records.get(name, 0))
            splits[name] = SplitCounts(
                self.records.get(name, 0), self.records.get(name, 0) - duplicates,
                int(leaked.sum()) * scale,
                float(spread * np.square(extra, dtype=np.float64).sum()),
                float(spread * np.square(leaked, dtype=np.float64).sum()))
            at = end
        totals = np.bincount(inverse, weights=copies, minlength=distinct.size)
        chosen = np.flatnonzero(totals > 1)[:kept]  # distinct is sorted: the smallest first
        examples = []
        split_of = np.repeat(np.arange(len(names)), [fps.size for fps, _ in arrays])
        for index in chosen.tolist():
            fp = int(distinct[index])
            where = {names[int(split_of[row])]: int(copies[row])
                     for row in np.flatnonzero(inverse == index).tolist()}
            examples.append(Example(fp, where, self.samples.get(fp)))
        return BucketResult(splits, int((holders > 1).sum()) * scale, tuple(examples),
                            self.level)


def summarize(results: Iterable[BucketResult], splits: Sequence[str],
              preview: Callable[[bytes], str] | None = None,
              kept: int = EXAMPLES_KEPT, method: str = BYTES_METHOD) -> dict[str, Any]:
    """The manifest's ``duplicates`` document from every bucket's result.

    Args:
        results: each bucket's :class:`BucketResult`, in any order.
        splits: every split name (a split no record reached counts zeros).
        preview: a sampled record's first bytes -> a short text shown as its example;
            None: none.
        kept: how many examples to keep (the smallest fingerprints).
        method: what was compared: :data:`BYTES_METHOD` or a :func:`key_method`.

    Returns:
        ``{"method", "exact", "splits": {split: {records, distinct, duplicates, leaked}},
        "in_several_splits", "examples": [{fingerprint, copies, bytes, preview}]}``; when a
        bucket was sampled (``exact`` false), also ``"sampled"`` (the smallest fraction of
        distinct records a bucket kept) and each split's ``"standard_error"`` of its
        duplicates and leaked records.
    """
    totals = {s: SplitCounts() for s in splits}
    several = 0
    level = 0
    examples: list[Example] = []
    for result in results:
        for split, counts in result.splits.items():
            totals[split] = totals.get(split, SplitCounts()) + counts
        several += result.several
        level = max(level, result.level)
        examples.extend(result.examples)
    examples = sorted(examples, key=lambda e: e.fingerprint)[:kept]
    shown = []
    for example in examples:
        entry: dict[str, Any] = {"fingerprint": f"{example.fingerprint:016x}",
                                 "copies": dict(sorted(example.copies.items()))}
        if example.sample is not None:
            size, head = example.sample
            entry["bytes"] = size
            if preview is not None:
                entry["preview"] = preview(head)
        shown.append(entry)
    per_split = {}
    for split, c in sorted(totals.items()):
        entry = {"records": c.records, "distinct": c.distinct, "duplicates": c.duplicates,
                 "leaked": c.leaked}
        if level:
            entry["standard_error"] = {"duplicates": round(math.sqrt(c.duplicates_variance)),
                                       "leaked": round(math.sqrt(c.leaked_variance))}
        per_split[split] = entry
    document: dict[str, Any] = {"method": method, "exact": level == 0}
    if level:
        document["sampled"] = 2.0 ** -level
    document.update({"splits": per_split, "in_several_splits": several, "examples": shown})
    return document


def batch_fingerprints(payload: bytes | bytearray | memoryview | None, offsets: np.ndarray,
                       crc32c: np.ndarray, pieces: Sequence[Sequence[Any]] | None = None,
                       slices: list | None = None
                       ) -> tuple[np.ndarray, dict[int, tuple[int, bytes]]]:
    """The fingerprints of a batch of records and the samples among them.

    Args:
        payload: the records' bytes, back to back (unread when ``pieces`` is given).
        offsets: the records' boundaries (length records + 1).
        crc32c: their plain CRC-32Cs (framing's).
        pieces: each record as byte pieces, when the batch holds them unjoined.
        slices: the records as ``tfrecord_format.record_slices`` gives them, when the
            caller has them (its CRC-32Cs were taken from them).

    Returns:
        The fingerprints (uint64), and for the sampled records fingerprint ->
        ``(size, first SAMPLE_BYTES bytes)``.
    """
    lengths = np.diff(np.asarray(offsets, np.int64))
    crc32 = (tff.record_piece_crc32s(pieces) if pieces is not None
             else tff.record_crc32s(payload, offsets, slices))
    fps = fingerprints(crc32c, crc32, lengths)
    samples = {}
    for i in sampled(fps).tolist():
        if pieces is not None:
            gathered = bytearray()
            for piece in pieces[i]:  # an image is not joined to keep its first bytes
                gathered += memoryview(piece).cast("B")[:SAMPLE_BYTES - len(gathered)]
                if len(gathered) >= SAMPLE_BYTES:
                    break
            head = bytes(gathered)
        else:
            a = int(offsets[i])
            head = bytes(memoryview(payload)[a:a + min(int(lengths[i]), SAMPLE_BYTES)])
        samples[int(fps[i])] = (int(lengths[i]), head)
    return fps, samples


def key_counts(split: str, keys: Sequence[bytes]) -> FingerprintCounts:
    """The fingerprints of records' key values (``codec.splits.key_bytes`` of each: the
    type is part of the bytes, so the integer 7 and the text "7" differ), as one split's
    counts: two records are duplicates when their keys are, whatever else they hold.

    Args:
        split: the split the records went to.
        keys: each record's key bytes (records without a key are left out by the caller).

    Returns:
        The counts, with the sampled keys' bytes.
    """
    counts = FingerprintCounts()
    if not keys:
        return counts
    payload = b"".join(keys)
    offsets = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    fps, samples = batch_fingerprints(payload, offsets, tff.record_crcs(payload, offsets))
    counts.add(split, fps)
    if samples:
        counts.add_samples(samples)
    return counts
