"""Quantiles and histograms of numbers: a histogram on a grid of the values' own order.

Every int64 and every float64 maps to a 64-bit *key* that sorts as the number does
(:func:`int_keys`, :func:`float_keys`; -0.0 is 0.0, NaN and the infinities are kept out by the
caller). The sketch holds a *level* ``L`` and, for every occupied bucket ``key >> L``, how
many values fell into it -- at level 0 a bucket is one value, so the sketch is exact. When
more than ``capacity`` buckets are occupied, the level rises one step at a time (each step
merges pairs of neighbouring buckets) until at most ``capacity`` remain.

Deterministic: the state is a function of the multiset of values alone, whatever the split
into bundles and the merge order. A part of the data never occupies more buckets than the
whole at any level, so no part's level exceeds ``L*``, the smallest level at which the whole
fits; a merge coarsens both sides to the higher level and rises while the union does not
fit, which ends exactly at ``L*``. The result is the whole multiset's histogram at level
``L*``, and every statistic derived from it (quantiles, both histogram types) is the same
double, bit for bit. ``tests/transforms/stats/test_stats_determinism.py`` checks it on random
partitions.

Error: exact (the true order statistics) while at most ``capacity`` distinct values were
seen. Beyond, a quantile lies in the same bucket as the true order statistic: its value is
off by at most that bucket's width and its rank by at most that bucket's count. Buckets are
contiguous runs of ``2**L`` keys; for floats that is a constant *relative* width within a
power of two (``2**(L-52)`` of the value below level 52), so on data spread over ``b``
binades ``capacity`` buckets give a relative resolution of about ``b / capacity`` binades.
An equal-width histogram bucket's count is exact at level 0, else a sketch bucket straddling
its edge is split in proportion to the overlap of value ranges.

Memory: ``16 * capacity`` bytes of state (a uint64 key and an int64 count per bucket) plus a
few integers; 16 KiB at the default capacity of 1024. While adding a batch of ``n`` values,
``16 * (capacity + n)`` bytes more, briefly.

Pure: numpy and the standard library.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DEFAULT_CAPACITY", "OrderSketch", "float_keys", "int_keys", "quantile_rank"]

DEFAULT_CAPACITY = 1024
_SIGN = np.uint64(1 << 63)


def int_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys that sort as the int64 ``values`` do.

    Args:
        values: int64 values.

    Returns:
        uint64 keys.
    """
    return np.asarray(values, dtype=np.int64).view(np.uint64) ^ _SIGN


def float_keys(values: np.ndarray) -> np.ndarray:
    """uint64 keys that sort as the (non-NaN) float ``values`` do; -0.0 gets 0.0's key.

    Args:
        values: floats without NaN.

    Returns:
        uint64 keys.
    """
    x = np.asarray(values, dtype=np.float64) + 0.0  # -0.0 + 0.0 is +0.0
    bits = x.view(np.uint64)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def _decode(kind: str, keys: np.ndarray) -> np.ndarray:
    keys = np.asarray(keys, dtype=np.uint64)
    if kind == "int":
        return (keys ^ _SIGN).view(np.int64).astype(np.float64)
    return np.where(keys & _SIGN, keys ^ _SIGN, ~keys).view(np.float64)


def _reduce_sorted(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum the counts of equal neighbours in sorted ``keys``."""
    if keys.size < 2:
        return keys, counts
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    if starts.size == keys.size:
        return keys, counts
    return keys[starts], np.add.reduceat(counts, starts)


class OrderSketch:
    """A mergeable histogram of int64 (``kind="int"``) or float keys; see the module doc.

    Args:
        kind: ``int`` or ``float``.
        capacity: the most buckets kept; past it, buckets merge by halving the resolution.

    Raises:
        ValueError: an unknown kind, or a capacity below 2.
    """

    __slots__ = ("kind", "capacity", "level", "keys", "counts", "count", "kmin", "kmax")

    def __init__(self, kind: str, capacity: int = DEFAULT_CAPACITY) -> None:
        if kind not in ("int", "float"):
            raise ValueError(f"an OrderSketch holds 'int' or 'float' keys, not {kind!r}")
        if capacity < 2:
            raise ValueError(f"an OrderSketch needs a capacity of at least 2, got {capacity}")
        self.kind = kind
        self.capacity = capacity
        self.level = 0
        self.keys = np.zeros(0, dtype=np.uint64)  # occupied buckets (key >> level), sorted
        self.counts = np.zeros(0, dtype=np.int64)
        self.count = 0
        self.kmin: int | None = None  # the exact smallest and largest key seen
        self.kmax: int | None = None

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    # -- adding and merging -----------------------------------------------------------------

    def add(self, values: np.ndarray) -> None:
        """Add numbers (ints for ``int``, non-NaN floats for ``float``).

        Args:
            values: the numbers.
        """
        keys = int_keys(values) if self.kind == "int" else float_keys(values)
        self.add_keys(keys)

    def add_keys(self, keys: np.ndarray) -> None:
        """Add values by their keys (:func:`int_keys` / :func:`float_keys`).

        Args:
            keys: uint64 keys.
        """
        if keys.size == 0:
            return
        kmin, kmax = keys.min(), keys.max()
        low, high = kmin >> np.uint64(self.level), kmax >> np.uint64(self.level)
        if int(high - low) <= 4 * keys.size:  # few buckets apart: counted without a sort
            dense = np.bincount(((keys >> np.uint64(self.level)) - low).astype(np.intp))
            present = np.flatnonzero(dense)
            buckets, counts = present.astype(np.uint64) + low, dense[present]
        else:
            buckets, counts = np.unique(keys >> np.uint64(self.level), return_counts=True)
        self._combine(buckets, counts.astype(np.int64), self.level, int(kmin), int(kmax),
                      int(keys.size))

    def add_repeated(self, value: int | float, times: int) -> None:
        """Add ``times`` copies of one number (a run of scalar rows' value counts).

        Args:
            value: the number.
            times: how many copies; none added when not positive.
        """
        if times <= 0:
            return
        keys = int_keys if self.kind == "int" else float_keys
        key = int(keys(np.array([value]))[0])
        bucket = np.uint64(key >> self.level)
        at = int(np.searchsorted(self.keys, bucket))
        if at < self.keys.size and self.keys[at] == bucket:
            self.counts[at] += times
            self._note(key, key, times)
            return
        self._combine(np.array([bucket], dtype=np.uint64),
                      np.array([times], dtype=np.int64), self.level, key, key, times)

    def _note(self, kmin: int, kmax: int, count: int) -> None:
        self.count += count
        self.kmin = kmin if self.kmin is None else min(self.kmin, kmin)
        self.kmax = kmax if self.kmax is None else max(self.kmax, kmax)

    def merge(self, other: OrderSketch) -> OrderSketch:
        """Add everything ``other`` holds to this sketch; returns this sketch.

        Args:
            other: a sketch of the same kind and capacity.

        Returns:
            This sketch.

        Raises:
            ValueError: the kinds or capacities differ.
        """
        if other.kind != self.kind or other.capacity != self.capacity:
            raise ValueError(f"cannot merge a {other.kind} sketch of capacity {other.capacity} "
                             f"into a {self.kind} sketch of capacity {self.capacity}")
        if other.count:
            self._combine(other.keys, other.counts, other.level, other.kmin, other.kmax,
                          other.count)
        return self

    def _combine(self, keys: np.ndarray, counts: np.ndarray, level: int, kmin: int,
                 kmax: int, count: int) -> None:
        top = max(self.level, level)
        mine = self.keys >> np.uint64(top - self.level)
        theirs = keys >> np.uint64(top - level)
        both = np.concatenate((mine, theirs))
        order = np.argsort(both, kind="stable")
        merged, sums = _reduce_sorted(both[order],
                                      np.concatenate((self.counts, counts))[order])
        while merged.size > self.capacity:
            top += 1
            merged, sums = _reduce_sorted(merged >> np.uint64(1), sums)
        self.level, self.keys, self.counts = top, merged, sums
        self._note(kmin, kmax, count)

    # -- reading ----------------------------------------------------------------------------

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each bucket's smallest and largest possible value (within the exact min and max).

        Returns:
            Two arrays, one entry per bucket in order.
        """
        if not self.count:
            return np.zeros(0), np.zeros(0)
        low = self.keys << np.uint64(self.level)
        high = low | np.uint64((1 << self.level) - 1)
        low = np.maximum(low, np.uint64(self.kmin))
        high = np.minimum(high, np.uint64(self.kmax))
        return _decode(self.kind, low), _decode(self.kind, high)

    def min_value(self) -> float:
        """The smallest value added (exact).

        Returns:
            The value, as a float.
        """
        return float(_decode(self.kind, np.array([self.kmin], dtype=np.uint64))[0])

    def max_value(self) -> float:
        """The largest value added (exact).

        Returns:
            The value, as a float.
        """
        return float(_decode(self.kind, np.array([self.kmax], dtype=np.uint64))[0])

    def exact(self) -> bool:
        """True while every bucket is one value (the sketch saw at most ``capacity``).

        Returns:
            Whether ranks and quantiles are exact.
        """
        return self.level == 0

    def value_at_rank(self, rank: int) -> float:
        """The order statistic of 0-based ``rank`` (exact at level 0, else an estimate
        inside the bucket that holds it).

        Args:
            rank: 0 to ``count - 1``.

        Returns:
            The value.

        Raises:
            IndexError: a rank outside that range.
        """
        if not 0 <= rank < self.count:
            raise IndexError(f"rank {rank} outside 0..{self.count - 1}")
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, rank, side="right"))
        low, high = self.bounds()
        lo, hi = float(low[i]), float(high[i])
        if lo == hi:
            return lo
        before = int(cum[i - 1]) if i else 0
        return lo + (hi - lo) * ((rank - before + 0.5) / int(self.counts[i]))

    def quantile(self, q: float) -> float:
        """The smallest value with at least a fraction ``q`` of the values at or below it
        (numpy's ``inverted_cdf`` method): ``rank = max(ceil(q * n) - 1, 0)``.

        Args:
            q: the fraction, 0 to 1.

        Returns:
            The value.
        """
        return self.value_at_rank(quantile_rank(q, self.count))

    def equal_width(self, low: float, high: float, buckets: int) -> list[float]:
        """Counts in ``buckets`` equal-width buckets over ``[low, high]`` (the last one closed):
        a sketch bucket spanning an edge is shared in proportion to the overlap.

        Args:
            low: the first bucket's low edge.
            high: the last bucket's high edge.
            buckets: how many buckets.

        Returns:
            A (fractional) count per bucket.
        """
        out = [0.0] * buckets
        if not self.count:
            return out
        width = (high - low) / buckets
        lows, highs = self.bounds()

        def edges(b: int) -> tuple[float, float]:
            return low + b * width, high if b == buckets - 1 else low + (b + 1) * width

        def index(value: float) -> int:
            """The bucket whose [low, high) edges, as reported, hold ``value``."""
            b = min(max(int((value - low) / width), 0), buckets - 1)
            while b > 0 and value < edges(b)[0]:
                b -= 1
            while b < buckets - 1 and value >= edges(b)[1]:
                b += 1
            return b

        for lo, hi, n in zip(lows.tolist(), highs.tolist(), self.counts.tolist()):
            if width <= 0:
                out[0] += n
                continue
            first, last = index(lo), index(hi)
            if first == last:
                out[first] += n
                continue
            for b in range(first, last + 1):
                edge_lo, edge_hi = edges(b)
                share = max(0.0, min(hi, edge_hi) - max(lo, edge_lo)) / (hi - lo)
                out[b] += n * share
        return out


def quantile_rank(q: float, n: int) -> int:
    """The 0-based rank of the ``q`` quantile of ``n`` values (inverted CDF).

    Args:
        q: the fraction, 0 to 1.
        n: the number of values, at least 1.

    Returns:
        The rank, 0 to ``n - 1``.
    """
    return min(max(math.ceil(q * n) - 1, 0), n - 1)
