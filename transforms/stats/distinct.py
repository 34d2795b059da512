"""Unique counts of bytes values: exact up to a capacity, then HyperLogLog.

Every value is hashed to 64 bits (:func:`hash_values`). The sketch holds the set of distinct
hashes while it has at most ``exact_capacity`` of them (the count is then exact, barring a
64-bit hash collision: below ``capacity**2 / 2**65``, about 1e-13 at the default), and beyond
that a HyperLogLog of precision ``p`` (``2**p`` one-byte registers: the top ``p`` bits of a
hash pick a register, which keeps the largest position of the first 1 bit in the other
``64 - p``). The estimate is Ertl's improved raw estimator ("New cardinality estimation
algorithms for HyperLogLog sketches", 2017), unbiased over the whole range without
empirical tables; its relative standard error is ``1.04 / sqrt(2**p)``: 0.81% at the
default ``p = 14``, so 99.7% of estimates fall within 2.4% (three standard errors).

Deterministic: the set of hashes, and so the registers (a maximum per register), depend only
on the set of values; whether the sketch is still exact depends only on how many distinct
values the whole data holds (a part never has more). Any split and merge order gives the same
count.

Hash: values up to 64 bytes 8 bytes at a time, each word mixed in with a multiplication and
MurmurHash3's 64-bit finaliser, vectorised over a batch; longer values by BLAKE2b (8-byte
digest), one call each (long values are few per batch and their hashing cost is per byte
anyway). The same value hashes the same on every machine, in every process and whatever
else is in its batch (no salted ``hash()``).

Memory: ``8 * exact_capacity`` bytes while exact (16 KiB at the default 2048), then
``2**p`` bytes (16 KiB at ``p = 14``).

Pure: numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from beam_tfrecords.transforms.codec.columnar_layout import exclusive_cumsum

__all__ = ["DEFAULT_EXACT_CAPACITY", "DEFAULT_PRECISION", "DistinctSketch", "hash_values"]

DEFAULT_EXACT_CAPACITY = 2048
DEFAULT_PRECISION = 14
_SHORT = 64  # values up to this many bytes: the vectorised polynomial hash
_MULT = np.uint64(0x9E3779B97F4A7C15)  # odd: the polynomial's base
_LENGTH_SALT = np.uint64(0xD6E8FEB86659FD93)
# Masks keeping the first r bytes of a little-endian word, r = 0..8.
_KEEP = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _fmix64(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser: every input bit affects every output bit."""
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xFF51AFD7ED558CCD)
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(0xC4CEB9FE1A85EC53)
    return h ^ (h >> np.uint64(33))


def hash_values(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """64-bit hashes of the byte strings ``data[starts[i]:starts[i] + lens[i]]``.

    Args:
      data: a uint8 buffer (an Arrow binary array's data, see ``binary_layout``).
      starts: each value's first byte in ``data``.
      lens: each value's length in bytes.

    Returns:
      A uint64 array, one hash per value: a function of that value's bytes alone.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lens = np.asarray(lens, dtype=np.int64)
    out = np.zeros(lens.size, dtype=np.uint64)
    short = lens <= _SHORT
    if short.any():
        out[short] = _hash_short(np.asarray(data, dtype=np.uint8), starts[short], lens[short])
    if not short.all():
        buf = memoryview(np.ascontiguousarray(data))
        for i in np.flatnonzero(~short).tolist():
            digest = hashlib.blake2b(buf[starts[i]:starts[i] + lens[i]], digest_size=8)
            out[i] = int.from_bytes(digest.digest(), "little")
    return out


def _hash_short(data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Values of at most 64 bytes, read 8 bytes at a time (little-endian, the last word
    zero-padded): ``h = len * salt``, then per word ``h = fmix64((h ^ word) * P)``."""
    padded = np.zeros(data.size + 8, dtype=np.uint8)
    padded[:data.size] = data
    # Every 8-byte window of the buffer, one per byte offset: word k of a value is one gather.
    windows = np.ndarray(shape=(data.size + 1,), dtype="<u8", buffer=padded, strides=(1,))
    h = lens.astype(np.uint64) * _LENGTH_SALT
    for k in range(int(-(-int(lens.max(initial=0)) // 8))):
        left = lens - 8 * k  # bytes of the value from this word on
        active = left > 0
        word = windows[np.where(active, starts + 8 * k, 0)] & _KEEP[np.clip(left, 0, 8)]
        h = np.where(active, _fmix64((h ^ word) * _MULT), h)
    return h


def hash_bytes(values: Sequence[bytes]) -> np.ndarray:
    """:func:`hash_values` of Python byte strings.

    Args:
        values: the values' bytes.

    Returns:
        A uint64 hash per value.
    """
    lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    return hash_values(data, exclusive_cumsum(lens), lens)


def _bit_length(x: np.ndarray) -> np.ndarray:
    n = np.zeros(x.shape, dtype=np.int64)
    for shift in (32, 16, 8, 4, 2, 1):
        big = x >= np.uint64(1 << shift)
        n += big * shift
        x = np.where(big, x >> np.uint64(shift), x)
    return n + (x > 0)


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        before = z
        z += x * y
        y += y
        if z == before:
            return z


def _tau(x: float) -> float:
    if x in (0.0, 1.0):
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        before = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == before:
            return z / 3.0


class DistinctSketch:
    """The number of distinct values among those added; see the module docstring.

    Args:
        precision: HyperLogLog precision, 4 to 18 (``2**precision`` registers).
        exact_capacity: distinct values counted exactly before the sketch takes over.

    Raises:
        ValueError: a precision outside 4 to 18.
    """

    __slots__ = ("precision", "exact_capacity", "hashes", "registers")

    def __init__(self, precision: int = DEFAULT_PRECISION,
                 exact_capacity: int = DEFAULT_EXACT_CAPACITY) -> None:
        if not 4 <= precision <= 18:
            raise ValueError(f"HyperLogLog precision must be 4..18, got {precision}")
        self.precision = precision
        self.exact_capacity = exact_capacity
        self.hashes: np.ndarray | None = np.zeros(0, dtype=np.uint64)  # sorted, distinct
        self.registers: np.ndarray | None = None  # uint8[2**precision] once past capacity

    def __getstate__(self):
        return (self.precision, self.exact_capacity, self.hashes, self.registers)

    def __setstate__(self, state) -> None:
        self.precision, self.exact_capacity, self.hashes, self.registers = state

    def exact(self) -> bool:
        """True while the count is exact (at most ``exact_capacity`` distinct hashes).

        Returns:
            Whether :meth:`count` is exact.
        """
        return self.registers is None

    def add_hashes(self, hashes: np.ndarray) -> None:
        """Add values by their :func:`hash_values`.

        Args:
            hashes: uint64 hashes.
        """
        if self.registers is None:
            self.hashes = np.union1d(self.hashes, hashes.astype(np.uint64, copy=False))
            if self.hashes.size > self.exact_capacity:
                self.registers = self._registers_of(self.hashes)
                self.hashes = None
        else:
            np.maximum(self.registers, self._registers_of(hashes), out=self.registers)

    def merge(self, other: DistinctSketch) -> DistinctSketch:
        """Add everything ``other`` saw; returns self.

        Args:
            other: a sketch of the same precision and capacity.

        Returns:
            This sketch.

        Raises:
            ValueError: the sketches' sizes differ.
        """
        if (other.precision, other.exact_capacity) != (self.precision, self.exact_capacity):
            raise ValueError("cannot merge distinct sketches of different precision/capacity")
        if other.registers is None:
            self.add_hashes(other.hashes)
        else:
            if self.registers is None:
                self.registers = self._registers_of(self.hashes)
                self.hashes = None
            np.maximum(self.registers, other.registers, out=self.registers)
        return self

    def _registers_of(self, hashes: np.ndarray) -> np.ndarray:
        p = self.precision
        registers = np.zeros(1 << p, dtype=np.uint8)
        if hashes.size:
            index = (hashes >> np.uint64(64 - p)).astype(np.int64)
            rest = hashes & np.uint64((1 << (64 - p)) - 1)
            rank = (64 - p) - _bit_length(rest) + 1
            np.maximum.at(registers, index, rank.astype(np.uint8))
        return registers

    def count(self) -> int:
        """The exact count while :meth:`exact`, else the HyperLogLog estimate, rounded.

        Returns:
            The number of distinct values.
        """
        if self.registers is None:
            return int(self.hashes.size)
        p = self.precision
        q = 64 - p
        m = 1 << p
        c = np.bincount(self.registers, minlength=q + 2).tolist()
        z = m * _tau(1.0 - c[q + 1] / m)
        for k in range(q, 0, -1):
            z = 0.5 * (z + c[k])
        z += m * _sigma(c[0] / m)
        return int(round(m * m / (2.0 * math.log(2.0)) / z))
